#include "sweep_args.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <optional>
#include <string>
#include <utility>

#include "parse_size.h"

namespace c10d::bench {
namespace {

constexpr std::array<std::pair<Collective, std::string_view>, 6> kCollectives = {{
    {Collective::kAllReduce, "all_reduce"},
    {Collective::kBroadcast, "broadcast"},
    {Collective::kReduce, "reduce"},
    {Collective::kAllGather, "all_gather"},
    {Collective::kReduceScatter, "reduce_scatter"},
    {Collective::kAllToAll, "all_to_all"},
}};

// The dtypes the sweep offers, by their nccl-tests names (also the `type` column).
constexpr std::array<std::pair<DType, std::string_view>, 8> kTypeNames = {{
    {DType::kFloat32, "float"},
    {DType::kFloat16, "half"},
    {DType::kBFloat16, "bfloat16"},
    {DType::kFloat64, "double"},
    {DType::kInt32, "int32"},
    {DType::kInt64, "int64"},
    {DType::kInt8, "int8"},
    {DType::kUInt8, "uint8"},
}};

std::optional<long long> parse_int(std::string_view s) {
  long long value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

// Applies one flag (by its long name) to `a`; returns an error message or "".
std::string apply_flag(std::string_view name, std::string_view value, SweepArgs& a) {
  const auto bad = [&] { return fmt::format("bad value '{}' for --{}", value, name); };
  if (name == "minbytes" || name == "maxbytes" || name == "stepbytes") {
    const auto bytes = parse_size(value);
    if (!bytes) return bad();
    (name == "minbytes" ? a.min_bytes : name == "maxbytes" ? a.max_bytes : a.step_bytes) = *bytes;
  } else if (name == "stepfactor" || name == "iters" || name == "warmup_iters" || name == "check" ||
             name == "root" || name == "blocking") {
    const auto n = parse_int(value);
    if (!n || *n < 0 || *n > 1'000'000'000) return bad();
    if (name == "stepfactor") a.step_factor = static_cast<std::size_t>(*n);
    if (name == "iters") a.iters = static_cast<int>(*n);
    if (name == "warmup_iters") a.warmup_iters = static_cast<int>(*n);
    if (name == "check") a.check = *n != 0;
    if (name == "root") a.root = static_cast<int>(*n);
    if (name == "blocking") a.blocking = *n != 0;
  } else if (name == "datatype") {
    const auto it = std::find_if(kTypeNames.begin(), kTypeNames.end(),
                                 [&](const auto& t) { return t.second == value; });
    if (it == kTypeNames.end()) {
      return fmt::format(
          "unknown datatype '{}' (float, half, bfloat16, double, int32, int64, "
          "int8, uint8)",
          value);
    }
    a.dtype = it->first;
  } else if (name == "op") {
    if (value != "sum" && value != "prod" && value != "min" && value != "max" && value != "avg") {
      return fmt::format("unknown op '{}' (sum, prod, min, max, avg)", value);
    }
    a.op = parse_reduce_op(value);
  } else if (name == "json" || name == "backend") {
    (name == "json" ? a.json_path : a.backend) = std::string(value);
  } else {
    return fmt::format("unknown flag --{}", name);
  }
  return "";
}

constexpr std::array<std::pair<char, std::string_view>, 11> kShortFlags = {{
    {'b', "minbytes"},
    {'e', "maxbytes"},
    {'i', "stepbytes"},
    {'f', "stepfactor"},
    {'n', "iters"},
    {'w', "warmup_iters"},
    {'c', "check"},
    {'d', "datatype"},
    {'o', "op"},
    {'r', "root"},
    {'z', "blocking"},
}};

}  // namespace

std::string_view type_name(DType dtype) {
  for (const auto& [d, name] : kTypeNames) {
    if (d == dtype) return name;
  }
  return dtype_name(dtype);
}

std::string_view collective_name(Collective collective) {
  for (const auto& [c, name] : kCollectives) {
    if (c == collective) return name;
  }
  return "?";
}

std::optional<Collective> parse_collective(std::string_view name) {
  for (const auto& [c, n] : kCollectives) {
    if (n == name) return c;
  }
  return std::nullopt;
}

ParsedArgs parse_sweep_args(std::string_view program, std::span<char* const> args,
                            bool accept_backend) {
  ParsedArgs out;
  SweepArgs& a = out.args;
  a.program = std::string(program);
  bool have_collective = false;
  for (std::size_t k = 0; k < args.size() && out.error.empty(); ++k) {
    const std::string_view arg = args[k];
    if (arg == "-h" || arg == "--help") {
      a.help = true;
      continue;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      const auto collective = parse_collective(arg);
      if (have_collective || !collective) {
        out.error = fmt::format(
            "unexpected argument '{}' (collectives: all_reduce, broadcast, reduce, all_gather, "
            "reduce_scatter, all_to_all)",
            arg);
      }
      a.collective = collective.value_or(Collective::kAllReduce);
      have_collective = true;
      continue;
    }
    // --name=value, --name value, -xvalue, -x value.
    std::string_view name;
    std::optional<std::string_view> value;
    if (arg.starts_with("--")) {
      name = arg.substr(2);
      if (const auto eq = name.find('='); eq != std::string_view::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
    } else {
      const auto it = std::find_if(kShortFlags.begin(), kShortFlags.end(),
                                   [&](const auto& f) { return f.first == arg[1]; });
      if (it == kShortFlags.end()) {
        out.error = fmt::format("unknown flag {}", arg);
        break;
      }
      name = it->second;
      if (arg.size() > 2) value = arg.substr(2);
    }
    if (name == "backend" && !accept_backend) {
      out.error = "unknown flag --backend (this program runs on MPI only)";
      break;
    }
    if (!value) {
      if (k + 1 == args.size()) {
        out.error = fmt::format("flag {} needs a value", arg);
        break;
      }
      value = args[++k];
    }
    out.error = apply_flag(name, *value, a);
  }
  if (!out.error.empty() || a.help) return out;
  if (!have_collective) {
    out.error =
        "missing collective (all_reduce, broadcast, reduce, all_gather, reduce_scatter, "
        "all_to_all)";
  } else if (a.min_bytes > a.max_bytes) {
    out.error = fmt::format("minbytes {} above maxbytes {}", a.min_bytes, a.max_bytes);
  } else if (a.step_factor <= 1 && a.step_bytes == 0) {
    out.error = "stepbytes 0 with stepfactor 1 never reaches maxbytes";
  } else if (a.step_factor > 1 && a.min_bytes == 0) {
    out.error = "minbytes 0 with a stepfactor never grows; start at 1 or more";
  } else if (a.iters < 1) {
    out.error = "iters must be at least 1";
  } else if (a.op == ReduceOp::kAvg && !is_floating_point(a.dtype)) {
    out.error = fmt::format("avg needs a floating-point datatype, not {}", type_name(a.dtype));
  }
  return out;
}

std::string usage(std::string_view program, bool accept_backend) {
  return fmt::format(
      "usage: {} all_reduce|broadcast|reduce|all_gather|reduce_scatter|all_to_all\n"
      "         [-b minbytes] [-e maxbytes] [-f stepfactor | -i stepbytes] [-n iters]\n"
      "         [-w warmup_iters] [-c 0|1] [-d float|half|bfloat16|double|int32|int64|int8|uint8]\n"
      "         [-o sum|prod|min|max|avg] [-r root] [-z 0|1] [--json FILE]{}\n"
      "  sizes take K, M, G suffixes (powers of 1024); long forms as nccl-tests\n"
      "  (--minbytes, --maxbytes, --stepfactor, --stepbytes, --iters, --warmup_iters, --check,\n"
      "  --datatype, --op, --root, --blocking)\n",
      program, accept_backend ? " [--backend tcp|mpi|ici]" : "");
}

}  // namespace c10d::bench
