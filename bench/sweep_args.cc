#include "sweep_args.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <optional>
#include <string>
#include <utility>

#include "cli_args.h"

namespace c10d::inline v1::bench {
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

// Applies one flag (by its long name; `flag` as the user wrote it, for messages) to `a`;
// returns an error message or "".
std::string apply_flag(std::string_view name, std::string_view flag, std::string_view value,
                       SweepArgs& a) {
  constexpr int kMaxCount = 1'000'000'000;
  const auto bad = [&](std::string_view takes) {
    return fmt::format("bad value '{}' for {}: it takes {}", value, flag, takes);
  };
  if (name == "minbytes" || name == "maxbytes" || name == "stepbytes") {
    const auto bytes = parse_size(value);
    if (!bytes) return bad("a whole number of bytes, with K, M or G (e.g. 8, 64K, 1.5M, 2G)");
    (name == "minbytes" ? a.min_bytes : name == "maxbytes" ? a.max_bytes : a.step_bytes) = *bytes;
  } else if (name == "check" || name == "blocking") {
    const auto n = parse_integer(value, 0, 1);
    if (!n) return bad("0 or 1");
    (name == "check" ? a.check : a.blocking) = *n != 0;
  } else if (name == "stepfactor") {
    const auto n = parse_integer(value, 1, kMaxCount);
    if (!n) return bad("an integer from 1 (add -i each step) to 1000000000");
    a.step_factor = static_cast<std::size_t>(*n);
  } else if (name == "iters") {
    const auto n = parse_integer(value, 1, kMaxCount);
    if (!n) return bad("an integer from 1 to 1000000000");
    a.iters = *n;
  } else if (name == "warmup_iters") {
    const auto n = parse_integer(value, 0, kMaxCount);
    if (!n) return bad("an integer from 0 to 1000000000");
    a.warmup_iters = *n;
  } else if (name == "root") {
    const auto n = parse_integer(value, 0, kMaxCount);
    if (!n) return bad("a rank, an integer from 0");
    a.root = *n;
  } else if (name == "datatype") {
    const auto it = std::find_if(kTypeNames.begin(), kTypeNames.end(),
                                 [&](const auto& t) { return t.second == value; });
    if (it == kTypeNames.end()) {
      return fmt::format(
          "unknown datatype '{}' for {} (float, half, bfloat16, double, int32, int64, int8, "
          "uint8)",
          value, flag);
    }
    a.dtype = it->first;
  } else if (name == "op") {
    if (value != "sum" && value != "prod" && value != "min" && value != "max" && value != "avg") {
      return fmt::format("unknown op '{}' for {} (sum, prod, min, max, avg)", value, flag);
    }
    a.op = parse_reduce_op(value);
  } else if (name == "json" || name == "backend") {
    if (value.empty()) return fmt::format("{} needs a value, not an empty string", flag);
    (name == "json" ? a.json_path : a.backend) = std::string(value);
  } else {
    return fmt::format("unknown flag {}", flag);
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
    std::string_view flag;  // as written, without an attached value
    std::optional<std::string_view> value;
    if (arg.starts_with("--")) {
      name = arg.substr(2);
      flag = arg;
      if (const auto eq = name.find('='); eq != std::string_view::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        flag = arg.substr(0, eq + 2);
      }
    } else {
      const auto it = std::find_if(kShortFlags.begin(), kShortFlags.end(),
                                   [&](const auto& f) { return f.first == arg[1]; });
      if (it == kShortFlags.end()) {
        out.error = fmt::format("unknown flag {}", arg);
        break;
      }
      name = it->second;
      flag = arg.substr(0, 2);
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
    out.error = apply_flag(name, flag, *value, a);
  }
  if (!out.error.empty() || a.help) return out;
  if (!have_collective) {
    out.error =
        "missing collective (all_reduce, broadcast, reduce, all_gather, reduce_scatter, "
        "all_to_all)";
  } else if (a.min_bytes > a.max_bytes) {
    out.error = fmt::format("minbytes {} (-b) is above maxbytes {} (-e)", a.min_bytes, a.max_bytes);
  } else if (a.min_bytes < element_size(a.dtype)) {
    // Sizes are whole elements, rounded down as nccl-tests does; below one element a row would
    // move nothing and report a bandwidth for it.
    out.error = fmt::format(
        "minbytes {} (-b) is less than one {} element ({} bytes); sizes are rounded down to "
        "whole elements, so start at {} or more",
        a.min_bytes, type_name(a.dtype), element_size(a.dtype), element_size(a.dtype));
  } else if (a.step_factor == 1 && a.min_bytes < a.max_bytes &&
             a.step_bytes < element_size(a.dtype)) {
    out.error = fmt::format(
        "stepbytes {} (-i) is less than one {} element ({} bytes): sizes are whole elements, so "
        "rows would repeat (or, at 0, never reach maxbytes)",
        a.step_bytes, type_name(a.dtype), element_size(a.dtype));
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

}  // namespace c10d::inline v1::bench
