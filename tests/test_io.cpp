// Array I/O: .npy and HDF5 round trips, the typed run-results writer and reader, progress lines.
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>

#include "common/error.h"
#include "common/fs.h"
#include "common/text.h"
#include "harness/analysis/campaign_stats.h"
#include "harness/io/array_io.h"
#include "harness/io/labelled_table.h"
#include "harness/io/run_results.h"
#include <hdf5.h>
#include "models/quant_ops.h"
#include "tests/catch.h"
#include "tests/helpers.h"

using namespace ufp4;

namespace {

using test::temp_dir;
bool exists(const std::string& p) { return access(p.c_str(), F_OK) == 0; }

// An HDF5 file changed in place, as h5py or HDFView would change it.
void edit_in_place(const std::string& path, const std::function<void(hid_t)>& change) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(f >= 0);
  change(f);
  H5Fclose(f);
}

// The file as one written before `content_scope` (every committed result): without it, and stamped with the hash of
// that time, which leaves the root's attributes out.
void to_earlier_scheme(const std::string& path) {
  edit_in_place(path, [](hid_t f) { CHECK(H5Adelete(f, "content_scope") >= 0); });
  const std::string old_hash = h5_content_sha256(path);
  edit_in_place(path, [&](hid_t f) {
    const hid_t a = H5Aopen(f, "content_sha256", H5P_DEFAULT), t = H5Aget_type(a);
    CHECK(H5Awrite(a, t, old_hash.data()) >= 0);
    H5Tclose(t);
    H5Aclose(a);
  });
  REQUIRE(verify_h5_content(path));
}

void set_double_attr(const std::string& path, const char* name, double v) {
  edit_in_place(path, [&](hid_t f) {
    const hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    CHECK(H5Awrite(a, H5T_NATIVE_DOUBLE, &v) >= 0);
    H5Aclose(a);
  });
}

// A run's results of `steps` steps with made-up curves (loss 5 - 0.1 a step).
RunResults made_up_run(const std::string& name, const std::string& recipe, int steps) {
  RunResults r;
  r.run_name = name;
  r.run_id = "0123456789abcdef";
  r.recipe = recipe;
  r.model = "tiny";
  r.diverged_step = -1;
  for (int i = 0; i < steps; ++i) {
    r.curves.step.push_back(i);
    r.curves.tokens.push_back(10.0 * (i + 1));
    r.curves.loss.push_back(5.0 - 0.1 * i);
    r.curves.lr.push_back(1e-3);
    r.curves.grad_norm.push_back(0.5 + i);
    r.curves.time_s.push_back(0.25 * i);
  }
  return r;
}

}  // namespace

TEST_CASE(".npy and HDF5 round trips", "[io]") {
  std::string dir = temp_dir();
  ArrayF32 a;
  a.shape = {3, 5};
  for (int i = 0; i < 15; ++i) a.data.push_back(i * 0.5f - 3);
  write_npy(dir + "/a.npy", a);
  ArrayF32 b = read_npy(dir + "/a.npy");
  CHECK(b.shape == a.shape);
  CHECK(b.data == a.data);
  {
    H5Writer w(dir + "/a.h5");
    w.write_f32("x", a.data.data(), a.shape);
    w.attr("note", std::string("hello"));
    w.attr("pi", 3.25);
    w.commit();
  }
  ArrayF32 c = read_h5_f32(dir + "/a.h5", "x");
  CHECK(c.data == a.data);
  CHECK(read_h5_string_attrs(dir + "/a.h5")["note"] == "hello");
  CHECK(read_h5_double_attr(dir + "/a.h5", "pi") == 3.25);
  {  // an uncommitted writer leaves nothing behind
    H5Writer w(dir + "/never.h5");
    w.write_f32("x", a.data.data(), a.shape);
  }
  CHECK(!exists(dir + "/never.h5"));
  CHECK_THROWS_AS(read_npy(dir + "/missing.npy"), Error);
  CHECK_THROWS_AS(read_h5_f32(dir + "/a.h5", "nope"), Error);
}

// HDF5 stamps each object header with the second it was made unless told not to. Without the stamps a file's
// bytes follow from what was written, so two files can be compared with sha256sum as well as by content hash.
TEST_CASE("HDF5 files: the same datasets, groups and attributes written a second apart are the same bytes", "[io]") {
  const std::string dir = temp_dir();
  const std::vector<float> x(5000, 1.5f);  // over 4,096 values: the chunked, compressed layout
  const auto write = [&](const std::string& path) {
    H5Writer w(path);
    w.write_f32("train/loss", x.data(), {5000});
    w.write_f32("eval/deep/loss", x.data(), {50, 100});
    w.attr("note", std::string("same"));
    w.attr("unit", std::string("nats"), "train");
    w.commit();
  };
  write(dir + "/a.h5");
  sleep(1);
  write(dir + "/b.h5");
  const std::string a = read_text_file(dir + "/a.h5"), b = read_text_file(dir + "/b.h5");
  REQUIRE(!a.empty());
  CHECK(a.size() == b.size());
  size_t first_difference = 0;
  while (first_difference < std::min(a.size(), b.size()) && a[first_difference] == b[first_difference]) ++first_difference;
  CHECK(first_difference == a.size());  // no byte differs (a time stamp would at its header's offset)
  CHECK(read_h5_f32(dir + "/b.h5", "eval/deep/loss").data == x);
  CHECK(read_h5_string_attrs(dir + "/b.h5", "train")["unit"] == "nats");
}

// A capture step of the 12-layer MoE proxy labels thousands of rows (each routed expert's operands, grids,
// transforms and scales): its labels attribute passed HDF5's 64 KiB limit for attributes in the original
// object header and the step's file failed on the GPU. Attributes of any size are written and read back.
TEST_CASE("HDF5 attributes larger than 64 KiB: a labelled table of many rows", "[io]") {
  const std::string dir = temp_dir();
  LabelledTable t(2, "a,b");
  for (int i = 0; i < 4000; ++i) t.add({"layers." + std::to_string(i % 12) + ".mlp.experts." + std::to_string(i) + ".fc1", "fwd_x", "e2m1", "H16"}, {i * 0.5, -i * 0.25});
  std::string labels;
  for (const auto& l : t.labels) labels += join(l, "\t") + "\n";  // the attribute as write_labelled_table makes it
  REQUIRE(labels.size() > 65536);
  {
    H5Writer w(dir + "/big.h5");
    write_labelled_table(w, "tensors", t);
    w.attr("long_note", std::string(200000, 'x'));
    w.commit();
  }
  const LabelledTable back = read_labelled_table(dir + "/big.h5", "tensors");
  REQUIRE(back.rows() == t.rows());
  CHECK(back.labels == t.labels);
  CHECK(back.values == t.values);
  CHECK(read_h5_string_attrs(dir + "/big.h5")["long_note"] == std::string(200000, 'x'));
  CHECK(h5_content_sha256(dir + "/big.h5").size() == 64);  // a file with attributes this large is hashed too
}

TEST_CASE("a run's results: what write_run_results writes, read_run_results reads back", "[io]") {
  const std::string dir = test::temp_dir();
  RunResults r = made_up_run("rt", "ufp4", 30);
  r.seed = 3;
  r.deterministic = true;
  r.data_train_tokens = 1000;
  r.weights_sha256 = "feed";
  r.device_name = "cpu";
  r.tokens_per_s = 12.5;
  RunCurves& c = r.curves;
  c.eval_step = {9, 19, 29};
  c.eval_loss = {4.5, 3.5, 2.25};
  c.alpha_step = {0, 10};
  c.alpha_keys = {"a/fprop.x", "b/fprop.w"};
  c.alpha = {{1.0, NAN}, {0.5, 0.75}};
  write_run_results(dir + "/rt.h5", r);
  REQUIRE(is_run_results(dir + "/rt.h5"));
  const RunResults b = read_run_results(dir + "/rt.h5");
  CHECK(b.run_name == r.run_name);
  CHECK(b.run_id == r.run_id);
  CHECK(b.recipe == r.recipe);
  CHECK(b.seed == 3);
  CHECK(b.deterministic);
  CHECK(b.data_train_tokens == 1000);
  CHECK(b.weights_sha256 == "feed");
  CHECK(b.tokens_per_s == 12.5);
  CHECK(b.curves.step == c.step);
  CHECK(b.curves.tokens == c.tokens);
  CHECK(b.curves.loss == c.loss);
  CHECK(b.curves.grad_norm == c.grad_norm);
  CHECK(b.curves.time_s == c.time_s);
  CHECK(b.curves.eval_loss == c.eval_loss);
  CHECK(b.curves.alpha_keys == c.alpha_keys);
  REQUIRE(b.curves.alpha.size() == 2);
  CHECK(std::isnan(b.curves.alpha[0][1]));
  CHECK(b.curves.alpha[1] == c.alpha[1]);
  // The summary, written from the curves: the last tenth (3 steps) and 300 of 1000 tokens.
  CHECK(b.steps_done == 30);
  CHECK(b.last_k == 3);
  CHECK(b.mean_loss_last_k == r.tail_mean(3));
  CHECK(b.final_eval_loss == 2.25);
  CHECK(b.epochs == 0.3);
  CHECK(!b.attr("git_commit").empty());  // provenance
  const RunResults header = read_run_results(dir + "/rt.h5", /*with_curves=*/false);
  CHECK(header.curves.loss.empty());
  CHECK(header.run_name == "rt");
  {
    H5Writer w(dir + "/other.h5");
    w.attr("note", std::string("not a run"));
    w.commit();
  }
  CHECK(!is_run_results(dir + "/other.h5"));
  CHECK_THROWS_AS(read_run_results(dir + "/other.h5"), Error);
}

// The verdicts read a run's summaries (final_eval_loss, mean_loss_last_k), root attributes that the content hash of a
// file written before `content_scope` (every committed result) does not cover; each must be what the hashed curves
// give, so an edited summary is refused, with or without curves.
TEST_CASE("a run's results whose summary was edited after the run are refused, naming the file and the summary", "[io]") {
  const std::string dir = test::temp_dir();
  RunResults r = made_up_run("edited", "bf16", 40);
  r.curves.eval_step = {19, 39};
  r.curves.eval_loss = {3.5, 3.25};
  const std::string path = dir + "/edited.h5";
  write_run_results(path, r);
  REQUIRE(read_run_results(path).final_eval_loss == 3.25);
  const auto set_double = [&](const char* name, double v) { set_double_attr(path, name, v); };
  to_earlier_scheme(path);
  set_double("final_eval_loss", 3.0);
  CHECK(verify_h5_content(path));  // the content hash of that time does not see it
  for (const bool with_curves : {true, false}) {
    try {
      read_run_results(path, with_curves);
      FAIL("an edited final_eval_loss was read");
    } catch (const Error& e) {
      CHECK(std::string(e.what()) == path + ": final_eval_loss 3 is not what its curves give (3.25): the file was edited after the run; remove it (a run trains it again)");
    }
  }
  set_double("final_eval_loss", 3.25);
  set_double("mean_loss_last_k", 1.0);
  CHECK(test::contains(test::thrown_message([&] { read_run_results(path, false); }), "mean_loss_last_k 1 is not what its curves give"));
  set_double("mean_loss_last_k", r.tail_mean(4));
  REQUIRE(read_run_results(path, false).mean_loss_last_k == r.tail_mean(4));
  set_double("epochs", 2.0);  // a trend's compute reads it
  CHECK(test::contains(test::thrown_message([&] { read_run_results(path, false); }), "epochs 2 is not what its curves give (0)"));
}

// flops_per_token, which a trend's compute reads, is a root attribute too and no function of the curves: a campaign
// checks it against what the run's model gives (PlannedRun::flops_per_token, from the manifest the run id hashes).
TEST_CASE("a campaign refuses a run whose flops_per_token is not what its model gives, naming the file and both values", "[io]") {
  const std::string dir = test::temp_dir();
  RunResults r = made_up_run("flops", "bf16", 10);
  r.flops_per_token = 1.5e6;
  r.data_train_tokens = 400;  // 0.25 epochs: compute exact in binary
  const std::string path = dir + "/flops.h5";
  write_run_results(path, r);
  to_earlier_scheme(path);
  RunSet set;
  PlannedRun p;
  p.name = "flops", p.model = "tiny", p.recipe = "bf16", p.seed = 1, p.path = path, p.flops_per_token = 1.5e6;
  set.runs.push_back(p);
  const CampaignRuns runs = read_campaign_runs(set);
  CHECK(runs.at("tiny").at("bf16").at(1).compute == 1.5e6 * 100);  // flops a token x the 100 tokens trained
  set_double_attr(path, "flops_per_token", 3e6);
  CHECK(verify_h5_content(path));  // the content hash of that time does not see it
  CHECK(test::thrown_message([&] { read_campaign_runs(set); }) ==
        path + ": flops_per_token 3000000 is not what its model tiny gives (1500000): the file was edited after the run, or "
                "train_flops_per_token changed since it; remove it (a run trains it again)");
}

// Files a run legitimately writes still read: no steps, no evaluation, a diverged run's NaN or infinite loss.
TEST_CASE("a run's results with no steps, no evaluation, or NaN and infinite losses read back", "[io]") {
  const std::string dir = test::temp_dir();
  RunResults none = made_up_run("none", "bf16", 0);
  RunResults no_eval = made_up_run("no_eval", "bf16", 12);
  no_eval.data_train_tokens = 1000;
  RunResults diverged = made_up_run("diverged", "ufp4", 30);
  diverged.curves.loss[27] = INFINITY;
  diverged.curves.loss[29] = NAN;
  diverged.curves.eval_step = {29};
  diverged.curves.eval_loss = {NAN};
  diverged.diverged = true;
  diverged.diverged_step = 27;
  for (const RunResults* r : {&none, &no_eval, &diverged}) {
    INFO(r->run_name);
    write_run_results(dir + "/" + r->run_name + ".h5", *r);
    const RunResults back = read_run_results(dir + "/" + r->run_name + ".h5");
    CHECK(back.content_verified);
    CHECK(back.steps_done == static_cast<int64_t>(r->curves.loss.size()));
    CHECK(read_run_results(dir + "/" + r->run_name + ".h5", /*with_curves=*/false).run_name == r->run_name);
  }
  CHECK(std::isnan(read_run_results(dir + "/no_eval.h5").final_eval_loss));
  CHECK(read_run_results(dir + "/no_eval.h5").epochs == 0.12);
  CHECK(std::isnan(read_run_results(dir + "/diverged.h5").mean_loss_last_k));  // the last three steps hold NaN and inf
}

// The content hash covers the root group's attributes (a run's identity, provenance and outcome live there): an
// attribute edited in place, added or removed is seen. Files written before `content_scope` are still checked as
// they were hashed (every committed result verifies in tests/test_integrity.cpp).
TEST_CASE("the content hash covers the root group's attributes: one edited, added or removed is seen", "[io]") {
  const std::string dir = temp_dir(), path = dir + "/root.h5";
  const std::vector<float> x(8, 2.0f);
  {
    H5Writer w(path);
    w.write_f32("x", x.data(), {8});
    w.attr("device_name", std::string("NVIDIA H200"));
    w.attr("weights", 1.5);
    w.commit();
  }
  REQUIRE(verify_h5_content(path));
  CHECK(read_h5_string_attrs(path)["content_scope"] == "every dataset and attribute");
  const auto edit = [&](const std::function<void(hid_t)>& change) { edit_in_place(path, change); };
  const std::string kept = read_text_file(path);
  edit([](hid_t f) {  // a value changed
    const double v = 2.5;
    const hid_t a = H5Aopen(f, "weights", H5P_DEFAULT);
    CHECK(H5Awrite(a, H5T_NATIVE_DOUBLE, &v) >= 0);
    H5Aclose(a);
  });
  CHECK(test::contains(test::thrown_message([&] { verify_h5_content(path); }), path + ": content does not match the content_sha256 it was written with"));
  write_text_atomically(path, kept);
  REQUIRE(verify_h5_content(path));
  edit([](hid_t f) { CHECK(H5Adelete(f, "device_name") >= 0); });  // one removed
  CHECK_THROWS_AS(verify_h5_content(path), Error);
  write_text_atomically(path, kept);
  edit([](hid_t f) {  // one added
    const double v = 1.0;
    const hid_t space = H5Screate(H5S_SCALAR), a = H5Acreate2(f, "added", H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(H5Awrite(a, H5T_NATIVE_DOUBLE, &v) >= 0);
    H5Aclose(a);
    H5Sclose(space);
  });
  CHECK_THROWS_AS(verify_h5_content(path), Error);
  write_text_atomically(path, kept);
  edit([](hid_t f) { CHECK(H5Adelete(f, "content_scope") >= 0); });  // the scope removed: hashed the old way, which differs
  CHECK_THROWS_AS(verify_h5_content(path), Error);
}
