#include "conformance.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "cases.h"
#include "check.h"

namespace c10d::inline v1::conformance {

const std::vector<Case>& cases() {
  static const std::vector<Case> table = {
      {"all_reduce", all_reduce_case},
      {"reduce", reduce_case},
      {"reduce_scatter", reduce_scatter_case},
      {"reduce_scatter_tensor", reduce_scatter_tensor_case},
      {"nan", nan_case},
      {"tensor_lists", tensor_lists_case},
      {"broadcast", broadcast_case},
      {"all_gather", all_gather_case},
      {"all_gather_into_tensor", all_gather_into_tensor_case},
      {"all_to_all", all_to_all_case},
      {"all_to_all_split_sizes", all_to_all_split_sizes_case},
      {"gather", gather_case},
      {"scatter", scatter_case},
      {"send_recv", send_recv_case},
      {"recv_any_source", recv_any_source_case},
      {"barrier", barrier_case},
      {"work_semantics", work_semantics_case},
      {"in_order", in_order_case},
      {"subgroups", subgroups_case},
      {"bad_arguments", bad_arguments_case},
      {"large_counts", large_counts_case},
      {"errors", errors_case},  // last: it may abort the group's transport
  };
  return table;
}

Summary run_conformance(ProcessGroup& pg, const Config& config) {
  Reporter rep(pg, config.max_failures);
  Summary summary;
  for (const Case& c : cases()) {
    if (!config.only.empty() &&
        std::find(config.only.begin(), config.only.end(), c.name) == config.only.end()) {
      continue;
    }
    ++summary.cases;
    const auto start = std::chrono::steady_clock::now();
    const auto took = [&] {
      summary.times.push_back(
          {c.name,
           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()});
    };
    try {
      c.run(pg, config, rep);
      took();
    } catch (const StopRun&) {
      took();
      rep.fail({c.name}, "the run stops here: an op failed or hung, so the group may be unusable");
      break;
    } catch (const std::exception& e) {
      took();
      rep.fail({c.name}, std::string("the case threw: ") + e.what());
      break;
    }
  }
  summary.ops = rep.ops();
  summary.checks = rep.checks();
  summary.failures = rep.take_failures();
  return summary;
}

}  // namespace c10d::inline v1::conformance
