// Manifests and recipes as a user writes them: every error names the real file:line of the offending
// key; the run id covers what changes the result (recipe content, model, data), not names or paths.
#include <fstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/fs.h"
#include "harness/io/provenance.h"
#include "harness/plan/manifest_fields.h"
#include "harness/plan/run_manifest.h"
#include "harness/train/trainer.h"
#include "models/recipe.h"
#include "tests/catch.h"
#include "tests/run_helpers.h"

using namespace ufp4;

namespace {

std::string write(const std::string& dir, const std::string& name, const std::string& body) {
  std::ofstream(dir + "/" + name) << body;
  return dir + "/" + name;
}

// The message of the Error that expanding (and resolving, as `ufp4 run` does) the manifest throws.
std::string manifest_error(const std::string& path) {
  try {
    for (const auto& m : RunManifest::expand(path)) (void)plan_run(m);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("every kind of manifest error names file:line of its key", "[manifest]") {
  const std::string d = test::temp_dir();
  struct Case {
    const char* what;
    std::string body;
    std::string expect;  // prefix after the directory: "<file>:<line>: <key>"
  };
  write(d, "parent.toml", "[model]\nname = \"tiny\"\n\n[train]\nsteps = 10\nbatch = 8\n");
  const std::vector<Case> cases = {
      {"unknown key", "[model]\nname = \"tiny\"\nbogus = 1\n", "m.toml:3: model.bogus: unknown key (allowed: name, seq_len)"},
      {"unknown section", "\n[modle]\nname = \"tiny\"\n", "m.toml:2: modle: unknown section"},
      {"a section that is a value", "train = 3\n", "m.toml:1: train: expected a table"},
      {"wrong type", "[train]\n\nsteps = \"ten\"\n", "m.toml:3: train.steps: expected an integer"},
      {"out of range", "[train]\nlr = 0.1\nsteps = 0\n", "m.toml:3: train.steps: 0 is out of range (allowed: 1 to"},
      {"number out of range", "[train]\nbeta1 = 1.5\n", "m.toml:2: train.beta1: 1.5 is out of range"},
      {"string not allowed", "[train]\nseed = 1\nschedule = \"linear\"\n", "m.toml:3: train.schedule: 'linear' (allowed: cosine, wsd)"},
      {"boolean expected", "[train]\ndeterministic = \"yes\"\n", "m.toml:2: train.deterministic: expected true or false"},
      {"micro_batch must divide", "[train]\nbatch = 8\nseed = 2\nmicro_batch = 3\n", "m.toml:4: train.micro_batch: 3 must divide train.batch (8)"},
      {"array of integers", "[capture]\nsteps = [1, \"x\"]\n", "m.toml:2: capture.steps: expected an array of non-negative integers"},
      {"parse error", "[train]\nsteps = 10\nlr = = 3\n", "m.toml:3: "},
      {"extends missing", "\nextends = \"nowhere.toml\"\n", "m.toml:2: extends: '"},
      {"error in a child of extends", "extends = \"parent.toml\"\n[train]\n\nwarmup = -1\n", "m.toml:4: train.warmup: -1 is out of range"},
      {"error inherited from the parent", "extends = \"parent.toml\"\n[model]\nseq_len = 64\n", ""},
      {"sweep value not a list", "[sweep]\n\"train.seed\" = 3\n", "m.toml:2: sweep.train.seed: expected a non-empty list of values"},
      {"sweep field without a section", "[sweep]\n\nseed = [1, 2]\n", "m.toml:3: sweep.seed: 'seed': a field is written section.key"},
      {"sweep value out of range", "[train]\nsteps = 5\n[sweep]\n\"train.seed\" = [1, -4]\n", "m.toml:4: train.seed: -4 is out of range"},
      {"ablation level of the wrong type", "[ablation.lr]\nfield = \"train.lr\"\nlevels = [\"fast\"]\n", "m.toml:3: train.lr: expected a number"},
      {"ablation without levels", "[ablation.x]\nfield = \"train.lr\"\n", "m.toml:1: ablation.x.levels: expected a non-empty list"},
      {"ablation unknown key", "[ablation.x]\nfield = \"train.lr\"\nlevels = [1e-3]\nlevel = 2\n", "m.toml:4: ablation.x.level: unknown key"},
      {"unknown model", "[model]\n\nname = \"huge\"\n", "m.toml:3: model.name: model: unknown name 'huge'"},
      {"two runs under one name", "[sweep]\n\"recipe.name\" = [\"bf16\", \"ufp4\", \"bf16\"]\n", "m.toml:2: recipe.name: two runs are both named '"},
      {"unknown recipe", "[recipe]\nname = \"ufp5\"\n", "m.toml:2: recipe.name: unknown recipe 'ufp5'"},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    const std::string msg = manifest_error(write(d, "m.toml", c.body));
    if (c.expect.empty()) {
      CHECK(msg.empty());
      continue;
    }
    CHECK(msg.rfind(d + "/" + c.expect, 0) == 0);
    CHECK(msg.find('\n') == std::string::npos);
    CHECK(msg.find(":0:") == std::string::npos);
  }
  // The parent's own error points into the parent.
  write(d, "bad_parent.toml", "[model]\nname = \"tiny\"\n[train]\n\nbatch = 0\n");
  CHECK(manifest_error(write(d, "m.toml", "extends = \"bad_parent.toml\"\n")).rfind(d + "/bad_parent.toml:5: train.batch: 0 is out of range", 0) == 0);
}

TEST_CASE("recipe errors name file:line of the key, also through extends", "[manifest]") {
  const std::string d = test::temp_dir();
  auto err = [&](const std::string& body) {
    try {
      Recipe::load(write(d, "r.toml", body));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(err("name = \"r\"\n[fprop]\nx = { quantize = true, grid = \"e3m0\" }\n").rfind(d + "/r.toml:3: fprop.x.grid: ", 0) == 0);
  CHECK(err("name = \"r\"\n[defaults]\nquantize = true\n\nscale = \"fp8\"\n").rfind(d + "/r.toml:5: defaults.scale: ", 0) == 0);
  CHECK(err("name = \"r\"\n[wgrad]\nrht = 24\n").rfind(d + "/r.toml:3: wgrad.rht: 24 (allowed: 0, 16, 32, 64, 128)", 0) == 0);
  CHECK(err("extends = \"ufp4\"\n[dgrad]\ndy = { rounding = \"up\" }\n").rfind(d + "/r.toml:3: dgrad.dy.rounding: ", 0) == 0);
  CHECK(err("extends = \"ufp4\"\n[fprop.x]\n\nblock = 7\n").rfind(d + "/r.toml:4: fprop.x.block: ", 0) == 0);
  CHECK(err("name = \"r\"\nbogus = 1\n").rfind(d + "/r.toml:2: bogus: unknown key", 0) == 0);
}

TEST_CASE("extends: a child inherits its parent's fields, not its [sweep] or [ablation]; its own expand as usual", "[manifest]") {
  const std::string d = test::temp_dir();
  test::write_manifest(d, "parent", "[model]\nname = \"tiny\"\n[recipe]\nname = \"bf16\"\n[data]\npath = \"" + test::ci_data() +
                                        "\"\n[train]\nsteps = 7\n[outputs]\ndir = \"" + d + "/runs\"\nname = \"p\"\n"
                                        "[sweep]\n\"train.seed\" = [1, 2, 3]\n[ablation.grid]\nfield = \"recipe.name\"\nlevels = [\"ufp4\"]\n");
  CHECK(RunManifest::expand(d + "/parent.toml").size() == 6);  // 3 seeds x (base + 1 level)
  const std::string child = test::write_manifest(d, "child", "extends = \"parent.toml\"\n[outputs]\nname = \"c\"\n");
  const std::vector<RunManifest> one = RunManifest::expand(child);
  REQUIRE(one.size() == 1);
  CHECK(one[0].steps == 7);  // a field, inherited
  CHECK(one[0].recipe == "bf16");
  const std::string own = test::write_manifest(d, "own", "extends = \"parent.toml\"\n[sweep]\n\"recipe.name\" = [\"bf16\", \"e2m1_ref\"]\n");
  const std::vector<RunManifest> two = RunManifest::expand(own);
  REQUIRE(two.size() == 2);
  CHECK(two[1].recipe == "e2m1_ref");
  CHECK(two[1].steps == 7);
}

TEST_CASE("the run id covers recipe content, model and data, not names or paths", "[manifest]") {
  const std::string d = test::temp_dir();
  write(d, "mine.toml", "name = \"mine\"\nextends = \"ufp4\"\n");
  const std::string path = test::write_manifest(d, "run", "[model]\nname = \"tiny\"\n[recipe]\nname = \"" + d + "/mine.toml\"\n[data]\npath = \"" +
                                                             test::ci_data() + "\"\n[outputs]\ndir = \"" + d + "/runs\"\n");
  RunManifest m = RunManifest::load(path);
  const std::string id0 = test::run_id_of(m);
  CHECK(plan_run(m).identity.data_prepared);
  CHECK(plan_run(m).identity.text.find(version()) == std::string::npos);  // the ufp4 version is recorded, not hashed
  // The same recipe content under another name and path: the same run.
  write(d, "other_name.toml", "name = \"something else\"\ndescription = \"renamed\"\nextends = \"ufp4\"\n");
  RunManifest renamed = m;
  renamed.recipe = d + "/other_name.toml";
  CHECK(test::run_id_of(renamed) == id0);
  // Editing the recipe file: a new run.
  write(d, "mine.toml", "name = \"mine\"\nextends = \"ufp4\"\n[wgrad]\nrht = 32\n");
  const std::string id1 = test::run_id_of(m);
  CHECK(id1 != id0);
  // Re-prepared data (another data.toml): a new run; a copy of the same data elsewhere: the same run.
  const std::string copy = d + "/data";
  make_dirs(copy);
  for (const char* f : {"data.toml", "train_000.bin", "val_000.bin"})
    write_text_atomically(copy + "/" + f, read_text_file(test::ci_data() + "/" + f));
  RunManifest moved = m;
  moved.data_path = copy;
  CHECK(test::run_id_of(moved) == id1);
  write_text_atomically(copy + "/data.toml", read_text_file(copy + "/data.toml") + "# prepared again\n");
  CHECK(test::run_id_of(moved) != id1);
  // A field that changes the result changes the id; where the outputs go does not.
  RunManifest seeded = m, elsewhere = m;
  seeded.seed = 2;
  elsewhere.out_dir = d + "/other";
  elsewhere.checkpoint_every = 7;
  CHECK(test::run_id_of(seeded) != id1);
  CHECK(test::run_id_of(elsewhere) == id1);
  RunManifest nondet = m;
  nondet.deterministic = false;
  CHECK(test::run_id_of(nondet) != id1);
}

TEST_CASE("ufp4 plan says why a run is reused or not; ufp4 run re-trains after a recipe edit", "[manifest]") {
  const std::string d = test::temp_dir();
  write(d, "mine.toml", "name = \"mine\"\nextends = \"bf16\"\n");
  const std::string path = test::tiny_manifest(d, d + "/mine.toml", 4);
  auto plan = [&] { return test::run_cli("plan " + path).out; };
  CHECK(plan().find("new: no earlier result of this name") != std::string::npos);
  CHECK(test::run_cli("-q run " + path).code == 0);
  CHECK(plan().find("reused: ") != std::string::npos);
  CHECK(test::run_cli("run " + path).out.find("results exist") != std::string::npos);
  write(d, "mine.toml", "name = \"mine\"\nextends = \"ufp4\"\n");
  const std::string why = plan();
  INFO(why);
  CHECK(why.find("new: differs from ") != std::string::npos);
  CHECK(why.find("recipe content") != std::string::npos);
  auto r = test::run_cli("run " + path);
  CHECK(r.code == 0);
  CHECK(r.out.find("results exist") == std::string::npos);  // the edit made a new run, trained now
}

TEST_CASE("a run over data.max_epochs is refused before anything runs (exit 2); plan shows the epochs", "[manifest]") {
  const std::string d = test::temp_dir();
  // tiny: 8 x 64 tokens a step; the CI corpus holds 2,089,215 training tokens, so 5,000 steps are 1.23 epochs.
  const std::string over = test::tiny_manifest(d, "bf16", 5000, "batch = 8\n");
  auto r = test::run_cli("run " + over);
  CHECK(r.code == 2);
  CHECK(r.out.find(over + ":8: train.steps: run tiny_bf16 asks for 2.56e+06 tokens, 1.23 epochs of the 2089215 training tokens") !=
        std::string::npos);
  CHECK(r.out.find("allowed: at most data.max_epochs = 1") != std::string::npos);
  CHECK(!is_dir(d + "/runs"));  // nothing ran, nothing written
  CHECK(test::run_cli("plan " + over).out.find(" 1.23! ") != std::string::npos);
  // Allowed when the manifest raises the limit (and says why); never above 4.
  const std::string body = read_text_file(test::tiny_manifest(d, "e2m1_ref", 5000, "batch = 8\n"));
  write(d, "raised.toml", body.substr(0, body.find("[train]")) + "max_epochs = 2\n" + body.substr(body.find("[train]")));  // in [data]
  RunManifest m = RunManifest::load(d + "/raised.toml");
  CHECK(m.max_epochs == 2.0);
  CHECK_NOTHROW(test::planned(m));  // 1.23 epochs of the CI corpus: the plan settles
  CHECK(manifest_error(write(d, "five.toml", "[data]\nmax_epochs = 5\n")).rfind(d + "/five.toml:2: data.max_epochs: 5 is out of range", 0) == 0);
}

TEST_CASE("the field reference experiments/FIELDS.md is what ufp4 plan --fields prints, from the parser's own list", "[manifest]") {
  std::ifstream in(std::string(UFP4_SOURCE_DIR) + "/experiments/FIELDS.md");
  const std::string committed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  INFO("regenerate: build/ufp4 plan --fields > experiments/FIELDS.md");
  CHECK(committed == manifest_fields_markdown());
  // Every key the list names parses; one it does not is refused with the list's keys as the allowed ones.
  const std::string d = test::temp_dir();
  for (const auto& f : manifest_fields())
    CHECK(manifest_fields_markdown().find("| `" + std::string(f.key) + "` |") != std::string::npos);
  const std::string bad = test::write_manifest(d, "bad", "[eval]\nevery = 5\nbogus = 1\n");
  try {
    RunManifest::load(bad);
    FAIL("an unknown key loaded");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("eval.bogus: unknown key (allowed: batches, every, final)") != std::string::npos);
  }
}
