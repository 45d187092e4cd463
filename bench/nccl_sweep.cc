#include "nccl_sweep.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "c10d/tensor.h"
#include "cli_args.h"

namespace c10d::inline v1::bench {
namespace {

bool rooted(Collective c) { return c == Collective::kBroadcast || c == Collective::kReduce; }

// One measured (collective, size, form).
struct Cell {
  bool measured = false;
  double time_us = 0;
  double algbw = 0;
  double busbw = 0;
  std::int64_t wrong = 0;
};

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

class Sweep {
 public:
  Sweep(const SweepArgs& args, SweepBackend& backend)
      : args_(args),
        backend_(backend),
        rank_(backend.rank()),
        n_(backend.size()),
        element_size_(static_cast<std::int64_t>(element_size(args.dtype))) {}

  int run() {
    if (rooted(args_.collective) && args_.root >= n_) {
      if (rank_ == 0) {
        fmt::print(stderr, "{}: root {} is not a rank of {} ranks\n", args_.program, args_.root,
                   n_);
      }
      return 2;
    }
    if (const std::string why = size_error(args_, n_); !why.empty()) {
      if (rank_ == 0) fmt::print(stderr, "{}: {}\n", args_.program, why);
      return 2;
    }
    // Buffers for the largest call: both forms fit in max(send, recv) elements.
    const OpCall largest = make_call(args_.max_bytes, false);
    buffer_elements_ =
        std::max<std::int64_t>({send_elements(largest, n_), recv_elements(largest, n_), 1});
    const std::vector<char> ranks = gather_ranks();
    if (!buffers_fit(ranks)) return 2;
    if (!open_json()) return 2;
    print_header(ranks);

    send_ = page_aligned(static_cast<std::size_t>(buffer_elements_ * element_size_));
    recv_ = page_aligned(static_cast<std::size_t>(buffer_elements_ * element_size_));

    const std::size_t first = *first_sweep_size(args_, n_);  // size_error() said there is one
    warm_up(args_.max_bytes);
    warm_up(first);

    std::int64_t failed_cells = 0;
    double busbw_sum = 0;
    int busbw_cells = 0;
    for (std::optional<std::size_t> size = first; size; size = next_size(*size)) {
      const OpCall shape = make_call(*size, false);
      const std::int64_t bytes =
          std::max(send_elements(shape, n_), recv_elements(shape, n_)) * element_size_;
      std::string line = row_prefix(args_, bytes, shape.count);
      for (const bool in_place : {false, true}) {
        const Cell cell = measure(make_call(*size, in_place), bytes);
        line += format_cell(cell);
        if (!cell.measured) continue;
        busbw_sum += cell.busbw;
        ++busbw_cells;
        if (cell.wrong != 0) ++failed_cells;
        add_json_row(bytes, shape.count, in_place, cell);
      }
      if (rank_ == 0) fmt::print("{}\n", line);
    }

    if (rank_ == 0) {
      fmt::print("# Out of bounds values : {} {}\n", failed_cells, failed_cells ? "FAILED" : "OK");
      fmt::print("# Avg bus bandwidth    : {:g}\n", busbw_cells ? busbw_sum / busbw_cells : 0.0);
      fmt::print("#\n");
      close_json();
    }
    return failed_cells ? 1 : 0;
  }

 private:
  // The size after `size`, or nullopt past maxbytes (or if it would not grow).
  std::optional<std::size_t> next_size(std::size_t size) const {
    return next_sweep_size(args_, size);
  }

  // The call nccl-tests makes for `size` bytes.
  OpCall make_call(std::size_t size, bool in_place) const {
    OpCall call;
    call.collective = args_.collective;
    call.dtype = args_.dtype;
    call.op = args_.op;
    call.root = args_.root;
    call.in_place = in_place;
    call.count = sweep_count(args_, size, n_);
    if (!send_) return call;  // shape only
    auto* const base = static_cast<char*>(recv_->data());
    call.send = in_place ? base : send_->data();
    call.recv = base;
    const std::int64_t block = call.count * element_size_ * rank_;
    if (in_place && args_.collective == Collective::kAllGather) call.send = base + block;
    if (in_place && args_.collective == Collective::kReduceScatter) call.recv = base + block;
    return call;
  }

  // The first form this backend runs, `warmup_iters` times, untimed and unchecked.
  void warm_up(std::size_t size) {
    for (const bool in_place : {false, true}) {
      if (!backend_.unsupported(args_.collective, in_place).empty()) continue;
      backend_.prepare(make_call(size, in_place));
      for (int i = 0; i < args_.warmup_iters; ++i) {
        backend_.start();
        if (args_.blocking) backend_.complete();
      }
      backend_.complete();
      return;
    }
  }

  Cell measure(const OpCall& call, std::int64_t bytes) {
    Cell cell;
    if (!backend_.unsupported(call.collective, call.in_place).empty()) return cell;
    cell.measured = true;
    const void* output = backend_.prepare(call);
    fill_buffers(call, rank_, n_, recv_->data(), buffer_elements_);
    backend_.start();  // one untimed call, as nccl-tests
    backend_.complete();

    backend_.barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < args_.iters; ++i) {
      backend_.start();
      if (args_.blocking) backend_.complete();
    }
    backend_.complete();
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    const double per_call = backend_.simulated_time() ? backend_.simulated_seconds() / args_.iters
                                                      : elapsed.count() / args_.iters;
    const double seconds = backend_.max_over_ranks(per_call);

    cell.time_us = seconds * 1e6;
    cell.algbw = seconds > 0 ? static_cast<double>(bytes) / 1e9 / seconds : 0;
    cell.busbw = cell.algbw * bus_factor(call.collective, n_);
    if (args_.check) {
      fill_buffers(call, rank_, n_, recv_->data(), buffer_elements_);
      backend_.start();
      backend_.complete();
      cell.wrong = backend_.sum_over_ranks(count_wrong(call, rank_, n_, output));
    }
    return cell;
  }

  std::string format_cell(const Cell& cell) const {
    if (!cell.measured) {
      return fmt::format("  {:>7}  {:>6}  {:>6}  {:>6}", "N/A", "N/A", "N/A", "N/A");
    }
    return cell_text(cell.time_us, cell.algbw, cell.busbw,
                     args_.check ? std::to_string(cell.wrong) : std::string());
  }

  // Every rank's record, kRecord bytes each: its host name, then "Pid <pid> on <host>" (for
  // nccl-tests' "Using devices" list). Collective.
  static constexpr std::size_t kRecord = 160;
  static constexpr std::size_t kHost = 64;
  std::vector<char> gather_ranks() {
    std::array<char, kRecord> mine{};
    gethostname(mine.data(), kHost - 1);
    fmt::format_to_n(mine.data() + kHost, kRecord - kHost - 1, "Pid {:>6} on {}", getpid(),
                     mine.data());
    std::vector<char> all(kRecord * static_cast<std::size_t>(n_));
    backend_.all_gather_bytes(mine, all);
    return all;
  }
  static std::string_view host_of(const std::vector<char>& ranks, int r) {
    return ranks.data() + static_cast<std::size_t>(r) * kRecord;
  }

  // Whether every rank's host can hold its ranks' send and receive buffers (they are zeroed, so
  // the pages are real). Checked before any is allocated: a size too big for the host is a
  // message naming it, not a bad_alloc or the OOM killer mid-run. Collective; the first rank of
  // each host short of memory says so.
  bool buffers_fit(const std::vector<char>& ranks) {
    const std::uint64_t per_rank = 2 * page_rounded(static_cast<std::uint64_t>(buffer_elements_) *
                                                    static_cast<std::uint64_t>(element_size_));
    int here = 0;
    int first_here = rank_;
    for (int r = 0; r < n_; ++r) {
      if (host_of(ranks, r) == host_of(ranks, rank_)) {
        ++here;
        first_here = std::min(first_here, r);
      }
    }
    const std::string why =
        memory_fault(fmt::format("maxbytes {} (-e, {})", args_.max_bytes,
                                 bytes_text(static_cast<double>(args_.max_bytes))),
                     per_rank, here);
    if (!why.empty() && first_here == rank_) {
      fmt::print(stderr, "{}: rank {} on {}: {}; lower -e\n", args_.program, rank_,
                 host_of(ranks, rank_), why);
    }
    return backend_.sum_over_ranks(why.empty() ? 0 : 1) == 0;
  }

  void print_header(const std::vector<char>& all) {
    if (rank_ != 0) return;

    const std::string step = args_.step_factor > 1 ? fmt::format("{}(factor)", args_.step_factor)
                                                   : fmt::format("{}(bytes)", args_.step_bytes);
    fmt::print("# {} {}: backend {}, {} ranks\n", args_.program, collective_name(args_.collective),
               backend_.name(), n_);
    fmt::print(
        "# minBytes {} maxBytes {} step: {} warmup iters: {} iters: {} validation: {} "
        "blocking: {}\n",
        args_.min_bytes, args_.max_bytes, step, args_.warmup_iters, args_.iters,
        args_.check ? 1 : 0, args_.blocking ? 1 : 0);
    if (const std::string note = skipped_sizes_note(args_, n_); !note.empty()) {
      fmt::print("# {}\n", note);
    }
    if (backend_.simulated_time()) {
      fmt::print(
          "# time: simulated interconnect time (the backend's virtual clock, per call, "
          "largest over the ranks), not wall time\n");
    }
    fmt::print("#\n# Using ranks\n");
    for (int r = 0; r < n_; ++r) {
      fmt::print("#  Rank {:>2} {}\n", r,
                 all.data() + static_cast<std::size_t>(r) * kRecord + kHost);
    }
    fmt::print("#\n");
    for (const bool in_place : {false, true}) {
      const std::string why = backend_.unsupported(args_.collective, in_place);
      if (!why.empty()) {
        fmt::print("# {} columns N/A: {}\n#\n", in_place ? "in-place" : "out-of-place", why);
      }
    }
    fmt::print(
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}           out-of-place                "
        "       in-place          \n",
        "", "", "", "", "");
    fmt::print(
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6} {:>6}  {:>7}  {:>6}  "
        "{:>6} {:>6}\n",
        "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
        "algbw", "busbw", "#wrong");
    fmt::print(
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>5}  {:>7}  {:>6}  "
        "{:>6}  {:>5}\n",
        "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
        "");
  }

  // Rank 0 opens the JSON file; every rank learns whether it could.
  bool open_json() {
    if (args_.json_path.empty()) return true;
    std::int64_t failed = 0;
    if (rank_ == 0) {
      json_.reset(std::fopen(args_.json_path.c_str(), "w"));
      if (!json_) {
        fmt::print(stderr, "{}: cannot write {}: {}\n", args_.program, args_.json_path,
                   std::strerror(errno));
        failed = 1;
      }
    }
    return backend_.sum_over_ranks(failed) == 0;
  }

  void add_json_row(std::int64_t bytes, std::int64_t count, bool in_place, const Cell& cell) {
    if (!json_) return;
    nlohmann::ordered_json row = {
        {"collective", collective_name(args_.collective)},
        {"backend", backend_.name()},
        {"world_size", n_},
        {"size", bytes},
        {"count", count},
        {"type", type_name(args_.dtype)},
        {"redop", is_reduction(args_.collective) ? reduce_op_name(args_.op) : "none"},
        {"root", rooted(args_.collective) ? args_.root : -1},
        {"in_place", in_place},
        {"time_us", cell.time_us},
        {"algbw", cell.algbw},
        {"busbw", cell.busbw},
        {"wrong", nullptr}};
    if (args_.check) row["wrong"] = cell.wrong;
    json_rows_.push_back(std::move(row));
  }

  // Writes the rows, one JSON array, to the file open_json() opened.
  void close_json() {
    if (!json_) return;
    const std::string text = json_rows_.dump(1) + "\n";
    if (std::fputs(text.c_str(), json_.get()) < 0 || std::fclose(json_.release()) != 0) {
      fmt::print(stderr, "{}: cannot write {}: {}\n", args_.program, args_.json_path,
                 std::strerror(errno));
    }
  }

  // Zeroed storage that starts on a page, whatever the heap's layout: how many pages a buffer
  // spans (and so what Open MPI's single-copy transfers pin) must not differ between programs.
  static std::size_t page_size() {
    static const auto kPage = static_cast<std::size_t>(std::max(4096L, ::sysconf(_SC_PAGESIZE)));
    return kPage;
  }
  static std::uint64_t page_rounded(std::uint64_t n) {
    const std::uint64_t page = page_size();
    return std::max<std::uint64_t>((n + page - 1) / page * page, page);
  }
  static std::unique_ptr<Storage> page_aligned(std::size_t n) {
    const std::size_t rounded = page_rounded(n);
    void* data = std::aligned_alloc(page_size(), rounded);
    if (data == nullptr) {
      throw std::runtime_error(fmt::format("cannot allocate a {}-byte buffer ({})", rounded,
                                           bytes_text(double(rounded))));
    }
    std::memset(data, 0, rounded);
    return std::make_unique<Storage>(data, n, [](void* p) { std::free(p); });
  }

  const SweepArgs& args_;
  SweepBackend& backend_;
  const int rank_;
  const int n_;
  const std::int64_t element_size_;
  std::int64_t buffer_elements_ = 0;
  std::unique_ptr<Storage> send_;  // zeroed, page-aligned
  std::unique_ptr<Storage> recv_;
  std::unique_ptr<std::FILE, FileCloser> json_;  // rank 0 only
  nlohmann::ordered_json json_rows_ = nlohmann::ordered_json::array();
};

}  // namespace

double bus_factor(Collective collective, int world_size) {
  const double n = world_size;
  switch (collective) {
    case Collective::kAllReduce:
      return 2 * (n - 1) / n;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      return (n - 1) / n;
    default:
      return 1;
  }
}

int run_sweep(const SweepArgs& args, SweepBackend& backend) { return Sweep(args, backend).run(); }

std::optional<std::size_t> next_sweep_size(const SweepArgs& args, std::size_t size) {
  const std::size_t next = args.step_factor > 1 ? size * args.step_factor : size + args.step_bytes;
  if (next <= size || next > args.max_bytes) return std::nullopt;
  if (args.step_factor > 1 && next / args.step_factor != size) return std::nullopt;
  return next;
}

namespace {

// A split collective's call carries size / n bytes per rank; a size under one element per rank
// would move nothing.
std::size_t least_split_size(const SweepArgs& args, int world_size) {
  const bool split = args.collective == Collective::kAllGather ||
                     args.collective == Collective::kReduceScatter ||
                     args.collective == Collective::kAllToAll;
  return element_size(args.dtype) * static_cast<std::size_t>(split ? world_size : 1);
}

}  // namespace

std::optional<std::size_t> first_sweep_size(const SweepArgs& args, int world_size) {
  for (std::optional<std::size_t> size = args.min_bytes; size;
       size = next_sweep_size(args, *size)) {
    if (sweep_count(args, *size, world_size) >= 1) return size;
  }
  return std::nullopt;
}

std::string size_error(const SweepArgs& args, int world_size) {
  if (first_sweep_size(args, world_size)) return "";
  const std::size_t least = least_split_size(args, world_size);
  return fmt::format(
      "no size from minbytes {} (-b) to maxbytes {} (-e) gives every rank one {} element for {} "
      "over {} ranks ({} bytes); use -e {} or more",
      args.min_bytes, args.max_bytes, type_name(args.dtype), collective_name(args.collective),
      world_size, least, least);
}

std::string skipped_sizes_note(const SweepArgs& args, int world_size) {
  const auto first = first_sweep_size(args, world_size);
  if (!first || *first == args.min_bytes) return "";
  return fmt::format(
      "sizes below {} bytes skipped: under one {} element per rank for {} over {} ranks ({} "
      "bytes)",
      *first, type_name(args.dtype), collective_name(args.collective), world_size,
      least_split_size(args, world_size));
}

std::int64_t sweep_count(const SweepArgs& args, std::size_t size, int world_size) {
  const auto total =
      static_cast<std::int64_t>(size) / static_cast<std::int64_t>(element_size(args.dtype));
  const bool split = args.collective == Collective::kAllGather ||
                     args.collective == Collective::kReduceScatter ||
                     args.collective == Collective::kAllToAll;
  return split ? total / world_size : total;
}

std::string row_prefix(const SweepArgs& args, std::int64_t bytes, std::int64_t count) {
  return fmt::format("{:>12}  {:>12}  {:>8}  {:>6}  {:>6}", bytes, count, type_name(args.dtype),
                     is_reduction(args.collective) ? reduce_op_name(args.op) : "none",
                     rooted(args.collective) ? args.root : -1);
}

std::string cell_text(double time_us, double algbw, double busbw, const std::string& wrong) {
  return fmt::format("  {}  {}  {}  {:>6}", float_str(time_us, 7), float_str(algbw, 6),
                     float_str(busbw, 6), wrong.empty() ? std::string("N/A") : wrong);
}

// nccl-tests' getFloatStr: `width` characters, with as many decimals as fit.
std::string float_str(double value, int width) {
  if (!std::isfinite(value)) return fmt::format("{:>{}}", value, width);
  int power = 0;
  for (double v = 1; value >= v && power < 30; v *= 10) ++power;
  if (power < width - 2) return fmt::format("{:>{}.2f}", value, width);
  if (power < width - 1) return fmt::format("{:>{}.1f}", value, width);
  if (power < width + 1) return fmt::format("{:>{}.0f}", value, width);
  return fmt::format("{:>{}.1e}", value, width);
}

}  // namespace c10d::inline v1::bench
