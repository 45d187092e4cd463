// metrics(), reset_metrics() and metrics_report() over the process-wide counters.
#include <fmt/format.h>

#include "c10d/lazy.h"
#include "lazy/context.h"

namespace c10d::inline v1::lazy {

Metrics metrics() {
  const Counters& c = counters();
  Metrics m;
  m.compiles = c.compiles.load();
  m.cache_hits = c.cache_hits.load();
  m.cache_misses = c.cache_misses.load();
  m.fused_kernels = c.fused_kernels.load();
  m.ops_run = c.ops_run.load();
  m.kernels_run = c.kernels_run.load();
  m.forced_syncs = c.forced_syncs.load();
  m.steps = c.steps.load();
  m.cse_merged = c.cse_merged.load();
  m.compile_seconds = static_cast<double>(c.compile_ns.load()) * 1e-9;
  m.execute_seconds = static_cast<double>(c.execute_ns.load()) * 1e-9;
  return m;
}

void reset_metrics() {
  Counters& c = counters();
  for (auto* a :
       {&c.compiles, &c.cache_hits, &c.cache_misses, &c.fused_kernels, &c.ops_run, &c.kernels_run,
        &c.forced_syncs, &c.steps, &c.cse_merged, &c.compile_ns, &c.execute_ns}) {
    a->store(0);
  }
}

std::string metrics_report() {
  const Metrics m = metrics();
  return fmt::format(
      "compiles: {}\ncache_hits: {}\ncache_misses: {}\nfused_kernels: {}\nops_run: {}\n"
      "kernels_run: {}\nforced_syncs: {}\nsteps: {}\ncse_merged: {}\ncompile_seconds: {:.6f}\n"
      "execute_seconds: {:.6f}\n",
      m.compiles, m.cache_hits, m.cache_misses, m.fused_kernels, m.ops_run, m.kernels_run,
      m.forced_syncs, m.steps, m.cse_merged, m.compile_seconds, m.execute_seconds);
}

}  // namespace c10d::inline v1::lazy
