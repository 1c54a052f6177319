#include "harness/io/bench_files.h"

#include "harness/io/provenance.h"
#include "harness/io/row_table.h"

namespace ufp4 {

namespace {

RowTable<KernelBenchRow> kernel_table() {
  using R = KernelBenchRow;
  // One identity field: the name holds its own '/'-separated parts (bench.h).
  return RowTable<R>("kernels", "names")
      .key("name", &R::name)
      .f32("time_us", &R::time_us, "microseconds, median over repetitions of the mean over iterations")
      .f32("time_us_mean", &R::time_us_mean)
      .f32("time_us_sd", &R::time_us_sd)
      .f32("bytes", &R::bytes, "bytes read + written, each input once and each output once")
      .f32("flops", &R::flops);
}

RowTable<StepBenchRow> step_table() {
  using R = StepBenchRow;
  return RowTable<R>("step")
      .key("model", &R::model)
      .key("impl", &R::impl)
      .key("recipe", &R::recipe)
      .key("note", &R::note)
      .f32("step_ms", &R::step_ms, "milliseconds per optimizer step, median over timed steps")
      .f32("step_ms_mean", &R::step_ms_mean)
      .f32("step_ms_sd", &R::step_ms_sd)
      .f32("tokens_per_s", &R::tokens_per_s)
      .f32("mfu", &R::mfu, "model FLOPs (train_flops_per_token) x tokens/s over the BF16 dense peak")
      .f32("peak_memory_gb", &R::peak_memory_gb)
      .f32("loss", &R::loss)
      .i64("batch", &R::batch)
      .i64("seq_len", &R::seq_len)
      .i64("steps", &R::steps);
}

RowTable<ScalingBenchRow> scaling_table() {
  using R = ScalingBenchRow;
  return RowTable<R>("scaling")
      .key("model", &R::model)
      .key("recipe", &R::recipe)
      .key("backend", &R::backend)
      .key("optimizer sharding", &R::sharding)
      .key("cuda graph", &R::cuda_graph)
      .key("layout", &R::layout)
      .key("unit", &R::unit)
      .f32("step_ms", &R::step_ms, "milliseconds per optimizer step (or MoE layer pass): the slowest rank's median over timed steps")
      .f32("step_ms_sd", &R::step_ms_sd)
      .f32("tokens_per_s", &R::tokens_per_s, "tokens a second of the whole world: gpus x batch x seq_len / step")
      .f32("mfu", &R::mfu)
      .f32("peak_memory_gb", &R::peak_memory_gb, "GB (1e9 bytes) the caching allocator handed out at its peak, the largest over ranks")
      .f32("peak_memory_gb_min", &R::peak_memory_gb_min)
      .f32("plan_memory_gb", &R::plan_memory_gb, "GB a GPU by the plan (data_parallel_memory_gb, ZeRO-1 for N > 1)")
      .f32("loss", &R::loss)
      .i64("gpus", &R::gpus)
      .i64("batch", &R::batch, "sequences a GPU a step")
      .i64("micro_batch", &R::micro_batch)
      .i64("seq_len", &R::seq_len)
      .i64("steps", &R::steps);
}

}  // namespace

void write_bench_header(H5Writer& w, const std::string& what) {
  write_provenance(w);
  w.attr("schema_version", static_cast<int64_t>(1));
  w.attr("what", what);
}

void write_kernel_rows(H5Writer& w, const std::vector<KernelBenchRow>& rows) { kernel_table().write(w, rows); }
void write_step_rows(H5Writer& w, const std::vector<StepBenchRow>& rows) { step_table().write(w, rows); }
void write_scaling_rows(H5Writer& w, const std::vector<ScalingBenchRow>& rows) { scaling_table().write(w, rows); }

std::vector<KernelBenchRow> read_kernel_rows(const std::string& path) { return kernel_table().read(path); }
std::vector<StepBenchRow> read_step_rows(const std::string& path) { return step_table().read(path); }
std::vector<ScalingBenchRow> read_scaling_rows(const std::string& path) { return scaling_table().read(path); }

}  // namespace ufp4
