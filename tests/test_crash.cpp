// Crash-safe writes: a write that fails part-way (fault injection, UFP4_FAIL_WRITE), a full disk (a
// small tmpfs, where this machine lets a test mount one) or a kill leaves the previous checkpoint and
// results intact, no temporary behind, and a one-line error naming the file and the cause (exit 1).
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/sha256.h"
#include "harness/io/array_io.h"
#include "harness/io/run_results.h"
#include "harness/plan/run_manifest.h"
#include "harness/train/trainer.h"
#include "tests/catch.h"
#include "tests/run_helpers.h"

using namespace ufp4;

namespace {

using test::Shell;
using test::sh;

std::vector<std::string> temporaries(const std::string& dir) {
  std::vector<std::string> all, tmp;
  walk_files(dir, "", all);
  for (const auto& f : all)
    if (f.find(".tmp-") != std::string::npos) tmp.push_back(f);
  return tmp;
}

std::vector<double> loss_curve(const std::string& h5) { return read_run_results(h5).curves.loss; }

// The error lines a failed `ufp4 run` printed (lines that name a failure).
std::vector<std::string> error_lines(const std::string& out) {
  std::vector<std::string> lines;
  std::istringstream in(out);
  for (std::string l; std::getline(in, l);)
    if (l.find("failed") != std::string::npos || l.find("error") != std::string::npos) lines.push_back(l);
  return lines;
}

}  // namespace

TEST_CASE("AtomicFile: all or nothing, the cause named, the previous file intact", "[crash]") {
  const std::string d = test::temp_dir();
  write_file_atomically(d + "/a.txt", "first");
  CHECK(read_text_file(d + "/a.txt") == "first");
  {
    AtomicFile f(d + "/a.txt");
    f.write("second", 6);
    CHECK(file_exists(f.temporary()));
  }  // not committed: the temporary goes, the file stays
  CHECK(read_text_file(d + "/a.txt") == "first");
  CHECK(temporaries(d).empty());
  try {
    write_file_atomically(d + "/no/such/folder/b.txt", "x");
    FAIL("no error");
  } catch (const RuntimeError& e) {
    CHECK(std::string(e.what()).find(d + "/no/such/folder/b.txt: cannot create (No such file or directory)") == 0);
  }
  // A temporary of a process that is gone is removed; one of a live process (ours) is not.
  std::ofstream(d + "/c.h5.tmp-2147483") << "left by a killed process";
  mkdir((d + "/r.ckpt.tmp-2147482").c_str(), 0755);
  std::ofstream(d + "/r.ckpt.tmp-2147482/model.pt") << "x";
  std::ofstream(d + "/d.h5" + temporary_suffix()) << "ours";
  CHECK(remove_stale_temporaries(d) == 2);
  CHECK(!file_exists(d + "/c.h5.tmp-2147483"));
  CHECK(!file_exists(d + "/r.ckpt.tmp-2147482"));
  CHECK(file_exists(d + "/d.h5" + temporary_suffix()));
}

TEST_CASE("a write that fails mid-checkpoint or mid-results: exit 1, one line, previous files intact, resumable", "[crash]") {
  const std::string d = test::temp_dir();
  // Checkpoints after steps 5, 10 and 15 (none after the last step: the results follow at once).
  const std::string path = test::tiny_manifest(d, "ufp4", 20, "checkpoint_every = 5\n");
  RunManifest m = RunManifest::load(path);
  RunResult full = test::train_manifest(m, RunOptions{});
  REQUIRE(full.status == RunStatus::kCompleted);
  const std::vector<double> reference = loss_curve(full.results_path);
  const std::string results_sha = sha256_file(full.results_path);
  const std::string bin = UFP4_BINARY;

  SECTION("the results file of a forced re-run fails: the previous results stay as they were") {
    Shell r = sh("UFP4_FAIL_WRITE=4 " + bin + " run --force " + path);  // files: 3 checkpoints, then the results
    CHECK(r.code == 1);
    const auto lines = error_lines(r.out);
    REQUIRE(!lines.empty());
    CHECK(lines.front().find(full.results_path + ": No space left on device") != std::string::npos);
    CHECK(sha256_file(full.results_path) == results_sha);
    CHECK(temporaries(d).empty());
    // The last checkpoint (after step 15) is intact: the next run resumes it to the same curve.
    REQUIRE(file_exists(test::checkpoint_of(m)));
    Shell again = sh(bin + " run --force " + path);
    CHECK(again.code == 0);
    CHECK(again.out.find("resumed from") != std::string::npos);
    CHECK(loss_curve(full.results_path) == reference);
  }
  SECTION("the second checkpoint fails: the first stays, and resuming it gives the uninterrupted curve") {
    std::remove(full.results_path.c_str());
    Shell r = sh("UFP4_FAIL_WRITE=2 " + bin + " run " + path);
    CHECK(r.code == 1);
    const auto lines = error_lines(r.out);
    REQUIRE(!lines.empty());
    CHECK(lines.front().find(test::checkpoint_of(m) + ": No space left on device") != std::string::npos);
    CHECK(temporaries(d).empty());
    CHECK(!file_exists(test::results_of(m)));
    Shell again = sh(bin + " run " + path);
    CHECK(again.code == 0);
    CHECK(again.out.find("at step 5") != std::string::npos);  // the checkpoint written before the failure
    CHECK(loss_curve(test::results_of(m)) == reference);
  }
}

TEST_CASE("a run killed at random points resumes to the uninterrupted curve; its temporaries are cleaned", "[crash]") {
  const std::string d = test::temp_dir();
  const std::string path = test::tiny_manifest(d, "bf16", 150, "checkpoint_every = 1\n");  // a checkpoint every step
  RunManifest m = RunManifest::load(path);
  RunManifest uninterrupted = m;
  uninterrupted.checkpoint_every = 0;  // the curve does not depend on checkpointing (what this test checks)
  RunResult full = test::train_manifest(uninterrupted, RunOptions{});
  REQUIRE(full.status == RunStatus::kCompleted);
  const std::vector<double> reference = loss_curve(full.results_path);
  std::remove(full.results_path.c_str());
  const std::string bin = UFP4_BINARY;
  // SIGKILL (no handler runs) at three points; each restart resumes whatever checkpoint is complete.
  int mid_run = 0;
  std::string log;
  for (const char* after : {"1.9", "1.3", "1.7"}) {
    log += sh("timeout -s KILL " + std::string(after) + " " + bin + " run " + path + "; echo killed-run-exit=$?; ls " + d + "/runs").out;
    mid_run += file_exists(test::checkpoint_of(m)) && !file_exists(test::results_of(m));
  }
  if (mid_run == 0) WARN("no kill landed during training (this machine is slow to start ufp4)");
  Shell last = sh(bin + " run " + path);
  CHECK(last.code == 0);
  REQUIRE(file_exists(test::results_of(m)));
  CHECK(loss_curve(test::results_of(m)) == reference);
  for (const auto& t : temporaries(d)) FAIL_CHECK("left behind: " << t << "\n" << log << "\nlast:\n" << last.out);
}

TEST_CASE("a full disk (a 256 KiB tmpfs): one-line error, exit 1, no temporary left", "[crash]") {
  const std::string d = test::temp_dir(), mnt = d + "/small";
  make_dirs(mnt);
  // Mounting needs a private mount namespace: as root, or in a user namespace where the kernel allows one.
  if (sh("unshare -rm sh -c 'mount -t tmpfs -o size=256k tmpfs " + mnt + "' || unshare -m sh -c 'mount -t tmpfs -o size=256k tmpfs " + mnt +
         "'").code != 0) {
    WARN("cannot mount a tmpfs here (no mount namespace): the full-disk test is skipped; the fault-injection test covers the same path");
    return;
  }
  const std::string unshare = sh("unshare -rm true").code == 0 ? "unshare -rm" : "unshare -m";
  // The tiny model's checkpoint (~1.3 MB) cannot fit; the first checkpoint write fails.
  const std::string path = test::write_manifest(
      d, "full", "[model]\nname = \"tiny\"\n[data]\npath = \"" + test::ci_data() +
                     "\"\n[train]\nsteps = 6\nbatch = 4\nmicro_batch = 4\ncheckpoint_every = 2\ndevice = \"cpu\"\n[eval]\nevery = 0\n[outputs]\ndir = \"" +
                     mnt + "/runs\"\n");
  Shell r = sh(unshare + " sh -c 'mount -t tmpfs -o size=256k tmpfs " + mnt + " && " + UFP4_BINARY + " run " + path +
               "; echo \"exit=$?\"; ls -a " + mnt + "/runs'");
  INFO(r.out);
  CHECK(r.out.find("exit=1") != std::string::npos);
  CHECK(r.out.find(".ckpt: No space left on device") != std::string::npos);
  CHECK(r.out.find(".tmp-") == std::string::npos);
  CHECK(r.out.find("Abort") == std::string::npos);
  const auto lines = error_lines(r.out);
  REQUIRE(!lines.empty());
  CHECK(lines.front().find("\n") == std::string::npos);
}

TEST_CASE("ufp4 run --gpus: SIGTERM to the parent stops every child at a checkpoint before it returns; the same command resumes", "[crash]") {
  const std::string d = test::temp_dir();
  // Periodic checkpoints as well as the one a stop writes (a checkpoint every step is the kill test's
  // business; here it would make the children's I/O most of the test's time).
  const std::string path = test::tiny_manifest(d, "bf16", 40, "checkpoint_every = 10\n");
  { std::ofstream(path, std::ios::app) << "[sweep]\n\"train.seed\" = [1, 2, 3]\n"; }
  const std::vector<RunManifest> runs = RunManifest::expand(path);
  REQUIRE(runs.size() == 3);
  const std::string bin = UFP4_BINARY;
  // --gpus on a CPU manifest: child processes as on a GPU node, each training on the CPU.
  const std::string concurrent = bin + " run " + path + " --gpus 1 --per-gpu 2";
  // The signal goes to the parent alone (not its process group): it must pass it on. It is sent once
  // the first child's log shows its step-10 evaluation, so it lands mid-run on any machine: the first
  // two runs are training, the third has not started. "[-]-only" keeps pgrep from matching this
  // shell's own command line.
  Shell stop = sh(concurrent + " > " + d + "/parent.log 2>&1 & p=$!; for i in $(seq 600); do grep -qs 'step 10 validation' " + d +
                  "/runs/logs/*-1.log && break; sleep 0.05; done; kill -TERM $p; wait $p; echo exit=$?; pgrep -f -- '" + path +
                  " [-]-only' | wc -l | sed 's/^/children-left=/'");
  INFO(stop.out << sh("cat " + d + "/parent.log").out);
  CHECK(stop.out.find("children-left=0") != std::string::npos);  // nothing writes after the parent returned
  const bool landed = stop.out.find("exit=130") != std::string::npos;
  if (!landed) WARN("the signal came after every run had finished (this machine is fast): only the cleanup is checked");
  else CHECK(sh("grep -c 'stopping' " + d + "/parent.log").out != "0\n");
  for (const auto& t : temporaries(d)) FAIL_CHECK("left behind: " << t);
  int checkpoints = 0;  // a child stopped before its first step leaves none (it starts over)
  for (const auto& m : runs) checkpoints += file_exists(test::checkpoint_of(m));
  Shell resume = sh(concurrent);
  INFO(resume.out);
  CHECK(resume.code == 0);
  std::vector<std::vector<double>> resumed;
  for (const auto& m : runs) {
    REQUIRE(file_exists(test::results_of(m)));
    resumed.push_back(loss_curve(test::results_of(m)));
  }
  if (checkpoints > 0) CHECK(sh("cat " + d + "/runs/logs/*.log").out.find("resumed from") != std::string::npos);
  // The same runs uninterrupted, one after another in this process: the same curves to the bit.
  for (size_t i = 0; i < runs.size(); ++i) {
    RunOptions force;
    force.force = true;
    RunManifest uninterrupted = runs[i];
    uninterrupted.checkpoint_every = 0;  // the curve does not depend on checkpointing (what this test checks)
    RunResult r = test::train_manifest(uninterrupted, force);
    REQUIRE(r.status == RunStatus::kCompleted);
    CHECK(loss_curve(r.results_path) == resumed[i]);
  }
}
