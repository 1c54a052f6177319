#include "harness/plan/campaign.h"

#include <dirent.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/fs.h"
#include "common/sha256.h"
#include "common/toml_util.h"
#include "harness/data/data.h"
#include "harness/io/run_results.h"
#include "harness/plan/run_files.h"

namespace ufp4 {

namespace {

// A folder's name without "./" segments and trailing slashes, to compare two spellings of it.
std::string normal_dir(std::string d) {
  while (d.rfind("./", 0) == 0) d = d.substr(2);
  for (size_t at; (at = d.find("/./")) != std::string::npos;) d.erase(at, 2);
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return d;
}

// Whether some campaign file under `experiments` names `dir` as its results folder (a folder read before
// that campaign ran does not exist yet).
bool names_campaign_results(const std::string& dir, const std::string& experiments) {
  DIR* d = ::opendir(experiments.c_str());  // experiments/<name>/campaign.toml: one level down only
  if (!d) return false;
  bool found = false;
  while (const dirent* e = ::readdir(d)) {
    const std::string f = experiments + "/" + e->d_name + "/campaign.toml";
    if (e->d_name[0] == '.' || !file_exists(f)) continue;
    found = found || normal_dir(toml_parse(f)["results"].value_or<std::string>("")) == normal_dir(dir);
  }
  ::closedir(d);
  return found;
}

// model -> the recipes the campaign's manifests sweep for it.
using Swept = std::map<std::string, std::set<std::string>>;

struct Reader {
  std::string file;
  [[noreturn]] void bad(const toml::node* n, const std::string& key, const std::string& msg) const {
    throw Error(file + ":" + std::to_string(n ? n->source().begin.line : 1) + ": " + key + ": " + msg);
  }
  std::string str(const toml::table& t, const std::string& prefix, const char* key, bool required = true) const {
    const toml::node* n = t.get(key);
    if (!n) {
      if (required) bad(&t, prefix + key, "missing (a string)");
      return "";
    }
    if (!n->is_string()) bad(n, prefix + key, "expected a string");
    return *n->value<std::string>();
  }
  double num(const toml::table& t, const std::string& prefix, const char* key, double lo, double hi, bool required = true, double def = 0) const {
    const toml::node* n = t.get(key);
    if (!n) {
      if (required) bad(&t, prefix + key, "missing (a number)");
      return def;
    }
    if (!n->is_number()) bad(n, prefix + key, "expected a number");
    const double v = *n->value<double>();
    if (!(v >= lo && v <= hi)) {
      std::ostringstream os;
      os << v << " is out of range (allowed: " << lo << " to " << hi << ")";
      bad(n, prefix + key, os.str());
    }
    return v;
  }
  void keys(const toml::table& t, const std::string& prefix, const std::set<std::string>& allowed) const {
    for (auto&& [k, v] : t)
      if (!allowed.count(std::string(k.str()))) {
        std::string a;
        for (const auto& s : allowed) a += (a.empty() ? "" : ", ") + s;
        bad(&v, prefix + std::string(k.str()), "unknown key (allowed: " + a + ")");
      }
  }
};

// A claim's contrast: a and b (gap(a) - gap(b)), or plus and minus (lists of recipes, each gap added
// or subtracted; an interaction is plus = [a, d], minus = [b, c]); never both forms, no recipe twice.
void read_contrast(const toml::table& c, const std::string& q, const Reader& r, RegisteredClaim& k) {
  const bool pair = c.get("a") || c.get("b"), lists = c.get("plus") || c.get("minus");
  if (pair == lists) r.bad(&c, q + "a", "give a and b (gap(a) - gap(b)), or plus and minus (lists of recipes)");
  if (pair) {
    k.plus = {r.str(c, q, "a")};
    k.minus = {r.str(c, q, "b")};
  } else {
    for (const char* key : {"plus", "minus"}) {
      const toml::array* a = c[key].as_array();
      const bool may_be_empty = std::string(key) == "minus";  // plus = ["ufp4"], minus = []: one recipe's gap (a trend's)
      if (!a || (a->empty() && !may_be_empty)) r.bad(c.get(key) ? c.get(key) : &c, q + key, "expected a non-empty list of recipe names");
      for (const auto& n : *a) {
        if (!n.is_string()) r.bad(&n, q + key, "expected recipe names");
        (std::string(key) == "plus" ? k.plus : k.minus).push_back(*n.value<std::string>());
      }
    }
  }
  std::set<std::string> seen;
  for (const auto* side : {&k.plus, &k.minus})
    for (const auto& name : *side)
      if (!seen.insert(name).second) r.bad(&c, q + (pair ? "a" : "plus"), "'" + name + "' appears twice in the contrast");
}

// Every recipe a claim names (and its baseline) is one the manifests sweep for the claim's model: a typo
// is found before anything trains, not after the pilot.
void check_recipes(const toml::table& c, const std::string& q, const Reader& r, const RegisteredClaim& k, const Swept& swept) {
  std::string sweeps;
  for (const auto& [model, recipes] : swept) sweeps += (sweeps.empty() ? "" : ", ") + model;
  for (const auto& model : k.trend() ? k.trend_models : std::vector<std::string>{k.model}) {
    const auto it = swept.find(model);
    const char* key = k.trend() ? "models" : "model";
    if (it == swept.end()) r.bad(c.get(key), q + key, "'" + model + "' is not a model the manifests train (they train: " + sweeps + ")");
    std::vector<std::string> named = k.plus;
    named.insert(named.end(), k.minus.begin(), k.minus.end());
    named.push_back(k.baseline);
    for (const auto& recipe : named)
      if (!it->second.count(recipe)) {
        std::string have;
        for (const auto& h : it->second) have += (have.empty() ? "" : ", ") + h;
        r.bad(&c, q + (recipe == k.baseline ? "baseline" : c.get("a") ? "a" : "plus"),
              "'" + recipe + "' is not a recipe the manifests sweep for " + model + " (they sweep: " + have + ")");
      }
  }
}

// A trend claim's models (at least three, so the slope has an interval); never powered, in no group.
void read_trend(const toml::table& c, const std::string& q, const Reader& r, RegisteredClaim& k) {
  const toml::array* a = c["models"].as_array();
  if (!a || a->size() < 3) r.bad(c.get("models"), q + "models", "expected a list of at least three models (a trend's slope over their compute)");
  for (const auto& n : *a) {
    if (!n.is_string()) r.bad(&n, q + "models", "expected model names");
    if (std::find(k.trend_models.begin(), k.trend_models.end(), *n.value<std::string>()) != k.trend_models.end())
      r.bad(&n, q + "models", "'" + *n.value<std::string>() + "' is listed twice (each size is one point)");
    k.trend_models.push_back(*n.value<std::string>());
  }
  if (c.get("model")) r.bad(c.get("model"), q + "model", "a trend claim names its models in models, not model");
  if (c.get("group")) r.bad(c.get("group"), q + "group", "a trend claim is in no group");
  if (const toml::node* pw = c.get("powered"); pw && (!pw->is_boolean() || *pw->value<bool>()))
    r.bad(pw, q + "powered", "a trend claim is not powered (allowed: false, or no key; the per-model claims set the seeds)");
  k.powered = false;
}

Registration read_registration(const toml::table& t, const Reader& r, const Swept& swept) {
  Registration g;
  const std::string p = "registration.";
  r.keys(t, p, {"date", "metric", "secondary", "test", "alpha", "power", "family", "notes", "claims"});
  g.date = r.str(t, p, "date");
  g.metric = r.str(t, p, "metric");
  g.secondary = r.str(t, p, "secondary");
  g.test = r.str(t, p, "test");
  g.family = r.str(t, p, "family");
  g.notes = r.str(t, p, "notes", false);
  g.alpha = r.num(t, p, "alpha", 1e-6, 0.5);
  g.power = r.num(t, p, "power", 0.5, 0.9999);
  const toml::array* claims = t["claims"].as_array();
  if (!claims || claims->empty()) r.bad(&t, p + "claims", "missing ([[registration.claims]]: id, model, text, a and b or plus and minus, direction, paper_effect or effect_of_interest)");
  std::set<std::string> ids;
  for (const auto& node : *claims) {
    const toml::table* c = node.as_table();
    if (!c) r.bad(&node, p + "claims", "expected tables");
    RegisteredClaim k;
    const std::string q = p + "claims.";
    r.keys(*c, q, {"id", "model", "text", "a", "b", "plus", "minus", "baseline", "direction", "paper_effect", "paper_source", "effect_of_interest",
                   "effect_source", "powered", "group", "models"});
    k.id = r.str(*c, q, "id");
    if (c->get("models")) read_trend(*c, q, r, k);
    else k.model = r.str(*c, q, "model");
    k.group = r.str(*c, q, "group", false);
    k.text = r.str(*c, q, "text");
    k.baseline = c->get("baseline") ? r.str(*c, q, "baseline") : "bf16";
    read_contrast(*c, q, r, k);
    check_recipes(*c, q, r, k, swept);
    if (const toml::node* pw = c->get("powered"); pw && !k.trend()) {
      if (!pw->is_boolean()) r.bad(pw, q + "powered", "expected true or false (false: reported with its MDD, the seeds not set for it)");
      k.powered = *pw->value<bool>();
    }
    const double dir = r.num(*c, q, "direction", -1, 1);
    if (dir != -1 && dir != 1) r.bad(c->get("direction"), q + "direction", "expected -1 (a below b) or 1 (a above b)");
    k.direction = static_cast<int>(dir);
    // A claim the paper states without a size registers the effect its seeds are powered for instead.
    const bool sized = c->get("paper_effect") != nullptr;
    if (sized == (c->get("effect_of_interest") != nullptr))
      r.bad(c, q + "paper_effect", "give exactly one of paper_effect (the paper's size of the difference) and effect_of_interest with "
                                   "effect_source (a claim the paper states without a size)");
    k.paper_effect = sized ? r.num(*c, q, "paper_effect", -100, 100) : NAN;
    k.paper_source = r.str(*c, q, "paper_source", false);
    k.effect_of_interest = sized ? k.paper_effect : r.num(*c, q, "effect_of_interest", -100, 100);
    k.effect_source = r.str(*c, q, "effect_source", !sized);
    if (k.effect_of_interest == 0 || (k.effect_of_interest < 0) != (k.direction < 0))
      r.bad(c->get(sized ? "paper_effect" : "effect_of_interest"), q + (sized ? "paper_effect" : "effect_of_interest"),
            "expected a non-zero effect with the claim's sign (direction " + std::to_string(k.direction) + ")");
    if (!ids.insert(k.id).second) r.bad(c->get("id"), q + "id", "'" + k.id + "' is registered twice");
    if (!k.group.empty()) {  // one level against the paper's choice, the same choice across the group
      if (k.plus.size() != 1 || k.minus.size() != 1 || k.direction != 1)
        r.bad(c->get("group"), q + "group", "a group's claim puts one level (a) against the paper's choice (b) with direction = 1");
      for (const auto& other : g.claims)
        if (other.group == k.group && other.minus != k.minus)
          r.bad(c->get("b") ? c->get("b") : c->get("minus"), q + (c->get("b") ? "b" : "minus"), "'" + k.minus.front() + "' is not group " + k.group + "'s choice ('" + other.minus.front() + "')");
    }
    g.claims.push_back(k);
  }
  return g;
}

// An integer at `key` of `in` within [lo, hi] (a count of seeds).
int64_t integer_in(const Reader& r, const toml::table& in, const std::string& prefix, const std::string& key, double lo, double hi) {
  const toml::node* n = in.get(key);
  if (n && !n->is_integer()) r.bad(n, prefix + key, "expected an integer");
  return static_cast<int64_t>(r.num(in, prefix, key.c_str(), lo, hi));
}

// [models]: campaign models only, each with its seeds within the registered [min, max], and every model a
// claim names among them (plan_seeds writes each; one left out would quietly run at the pilot's seeds).
void read_seed_models(const Reader& r, const toml::table& t, const Swept& swept, const Registration& reg, SeedPlan& s) {
  const toml::table* models = t["models"].as_table();
  if (!models) r.bad(&t, "models", "missing (a table: model = seeds)");
  std::set<std::string> names;
  for (const auto& [model, recipes] : swept) names.insert(model);
  r.keys(*models, "models.", names);
  for (auto&& [k, v] : *models) s.seeds[std::string(k.str())] = integer_in(r, *models, "models.", std::string(k.str()), s.min, s.max);
  for (const auto& k : reg.claims)
    for (const auto& model : k.trend() ? k.trend_models : std::vector<std::string>{k.model})
      if (!s.seeds.count(model)) r.bad(models, "models." + model, "missing (claim " + k.id + " is tested on it)");
}

// [claims."<id>"]: a table for each powered claim (only those set the seeds), with the pilot's paired sd
// and the seeds its power asked for.
void read_claim_sds(const Reader& r, const toml::table& t, const Registration& reg, SeedPlan& s) {
  std::set<std::string> powered;
  for (const auto& k : reg.claims)
    if (k.powered) powered.insert(k.id);
  const toml::table* claims = t["claims"].as_table();
  if (!claims && !powered.empty()) r.bad(&t, "claims", "missing (a table per powered claim: pilot_sd, seeds_for_power)");
  if (claims) r.keys(*claims, "claims.", powered);
  for (const auto& id : powered) {
    const std::string q = "claims." + id + ".";
    const toml::node* n = claims->get(id);
    if (!n || !n->is_table()) r.bad(n ? n : claims, "claims." + id, n ? "expected a table (pilot_sd, seeds_for_power)" : "missing (a table: pilot_sd, seeds_for_power)");
    const toml::table& c = *n->as_table();
    r.keys(c, q, {"pilot_sd", "seeds_for_power"});
    s.pilot_sd[id] = r.num(c, q, "pilot_sd", 0, 1e9);
    s.seeds_for_power[id] = integer_in(r, c, q, "seeds_for_power", 1, 1e9);
  }
}

// The seeds file, written once the pilot's runs were analysed (write_seed_plan), read back against the
// campaign it belongs to: its pilot, its models and their seed bounds, its powered claims. A file that
// does not fit (another campaign's, a hand edit, a claim key read as nested tables) is an error naming
// the file, line and key, not a silent fallback to the pilot's seeds or a claim without its pilot sd.
void read_seeds_file(const std::string& path, const Swept& swept, const Registration& reg, SeedPlan& s) {
  if (!file_exists(path)) return;
  const Reader r{path};
  const toml::table t = toml_parse(path);
  r.keys(t, "", {"pilot", "models", "claims"});
  if (integer_in(r, t, "", "pilot", 0, 1e6) != s.pilot) r.bad(t.get("pilot"), "pilot", "the campaign registers a pilot of " + std::to_string(s.pilot) + " seeds");
  read_seed_models(r, t, swept, reg, s);
  read_claim_sds(r, t, reg, s);
  s.source = path;
}

// A TOML key as a basic string, so that a dot in a name ("moe-ne0.65m") is not read as a nested table;
// quotes, backslashes and control characters escaped as TOML asks.
std::string toml_key(const std::string& k) {
  std::string q = "\"";
  for (const char ch : k) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      q += '\\';
      q += ch;
    } else if (u < 0x20 || u == 0x7f) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04X", u);
      q += esc;
    } else {
      q += ch;
    }
  }
  return q + "\"";
}

}  // namespace

Campaign Campaign::load(const std::string& path) {
  const Reader r{path};
  const toml::table t = toml_parse(path);
  r.keys(t, "", {"name", "report", "title", "paper", "results", "reads", "manifests", "data", "seeds", "registration"});
  Campaign c;
  c.path = path;
  c.name = r.str(t, "", "name");
  c.report = r.str(t, "", "report");
  c.title = r.str(t, "", "title", false);
  c.paper = r.str(t, "", "paper", false);
  if (!c.paper.empty() && !file_exists(c.paper)) r.bad(t.get("paper"), "paper", "'" + c.paper + "' not found (the paper's numbers, reports/paper/)");
  c.results_dir = r.str(t, "", "results");
  if (const toml::node* rd = t.get("reads")) {
    const toml::array* a = rd->as_array();
    if (!a) r.bad(rd, "reads", "expected a list of results folders of other campaigns");
    for (const auto& d : *a) {
      if (!d.is_string()) r.bad(&d, "reads", "expected folder names");
      const std::string dir = *d.value<std::string>();
      if (normal_dir(dir) == normal_dir(c.results_dir)) r.bad(&d, "reads", "'" + dir + "' is this campaign's own results folder");
      if (!is_dir(dir) && !names_campaign_results(dir, dir_of(dir_of(path))))
        r.bad(&d, "reads", "'" + dir + "' is neither a folder nor the results folder of a campaign under " + dir_of(dir_of(path)) +
                               " (a misspelt folder would train its runs again)");
      c.read_dirs.push_back(dir);
    }
  }
  const toml::array* ms = t["manifests"].as_array();
  if (!ms || ms->empty()) r.bad(&t, "manifests", "missing (a list of manifest files, relative to this file)");
  for (const auto& m : *ms) {
    if (!m.is_string()) r.bad(&m, "manifests", "expected file names");
    const std::string f = dir_of(path) + "/" + *m.value<std::string>();
    if (!file_exists(f)) r.bad(&m, "manifests", "'" + f + "' not found");
    c.manifests.push_back(f);
  }
  if (const toml::table* d = t["data"].as_table())
    for (auto&& [k, v] : *d) {
      if (!v.is_string()) r.bad(&v, "data." + std::string(k.str()), "expected the path of a committed data.toml");
      const std::string file = *v.value<std::string>();
      if (!file_exists(file)) r.bad(&v, "data." + std::string(k.str()), "'" + file + "' not found");
      c.data_pins[std::string(k.str())] = file;
      pin_data_manifest(std::string(k.str()), file);
    }
  const toml::table* seeds = t["seeds"].as_table();
  if (!seeds) r.bad(&t, "seeds", "missing (pilot, min, max)");
  r.keys(*seeds, "seeds.", {"pilot", "min", "max", "transition_gate"});
  c.seeds.transition_gate = static_cast<int64_t>(r.num(*seeds, "seeds.", "transition_gate", 0, 1e6, false, 0));
  c.seeds.pilot = static_cast<int64_t>(r.num(*seeds, "seeds.", "pilot", 2, 1000));
  c.seeds.min = static_cast<int64_t>(r.num(*seeds, "seeds.", "min", 2, 1000));
  c.seeds.max = static_cast<int64_t>(r.num(*seeds, "seeds.", "max", 2, 1000));
  if (c.seeds.pilot > c.seeds.min || c.seeds.min > c.seeds.max)
    r.bad(seeds, "seeds", "expected pilot <= min <= max (the pilot's runs count among the campaign's seeds)");
  const toml::table* reg = t["registration"].as_table();
  if (!reg) r.bad(&t, "registration", "missing (what the campaign tests, written before it runs)");
  // Every run writes to the campaign's folder, and no manifest sweeps the seed (the campaign sets it).
  Swept swept;
  for (const auto& f : c.manifests)
    for (const auto& m : RunManifest::expand(f)) {
      if (m.out_dir != c.results_dir)
        throw Error(f + ": outputs.dir: '" + m.out_dir + "' is not the campaign's results folder '" + c.results_dir + "' (" + path + ")");
      if (m.differs.find("train.seed") != std::string::npos)
        throw Error(f + ": a campaign's manifest must not sweep train.seed: the campaign sets the seeds (" + path + " [seeds])");
      swept[m.model].insert(recipe_stem(m.recipe));
    }
  c.registration = read_registration(*reg, r, swept);
  read_seeds_file(c.seeds_path(), swept, c.registration, c.seeds);
  return c;
}

std::vector<RunManifest> Campaign::runs(bool pilot_only) const {
  std::vector<RunManifest> bases;
  for (const auto& f : manifests)
    for (const auto& m : RunManifest::expand(f)) bases.push_back(m);
  // Seed by seed across every manifest: a campaign stopped part-way leaves whole seeds of every model,
  // which is what the paired tests use.
  std::vector<RunManifest> out;
  for (int64_t s = 1;; ++s) {
    bool any = false;
    for (const auto& m : bases) {
      const auto it = seeds.seeds.find(m.model);
      if (s > (pilot_only || it == seeds.seeds.end() ? seeds.pilot : it->second)) continue;
      RunManifest r = m;
      r.seed = s;
      r.name += "-" + std::to_string(s);
      r.differs += (r.differs.empty() ? "" : ", ") + std::string("train.seed=") + std::to_string(s);
      out.push_back(r);
      any = true;
    }
    if (!any) break;
  }
  return out;
}

RunSet Campaign::resolve(bool pilot_only) const {
  RunSet set;
  set.campaign = name;
  set.campaign_path = path;
  set.results_dir = results_dir;
  set.read_dirs = read_dirs;
  set.report = report;
  set.title = title.empty() ? "Campaign " + name : title;
  set.paper = paper;
  set.registration = registration;
  set.seeds = seeds;
  std::set<std::string> in_set;
  for (const auto& plan : plans(pilot_only)) {
    PlannedRun p;
    p.name = plan.name;
    p.run_id = plan.run_id;
    p.model = plan.model.name;
    p.recipe = recipe_stem(plan.recipe_file);
    p.seed = plan.train.seed;
    p.steps = plan.train.steps;
    p.train_tokens = plan.train_tokens;
    p.flops_per_token = train_flops_per_token(plan.model);
    std::vector<std::string> rejected;
    p.path = find_results(plan, &rejected);
    for (const auto& why : rejected) set.ignored.push_back(why);
    if (p.path.empty()) p.path = read_result(plan);
    if (!p.path.empty()) in_set.insert(p.path);
    set.runs.push_back(p);
  }
  std::vector<std::string> files;
  if (is_dir(results_dir)) walk_files(results_dir, ".h5", files);
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    if (in_set.count(f)) continue;
    bool named = false;
    for (const auto& why : set.ignored) named = named || why.rfind(f + ":", 0) == 0;
    if (named) continue;
    try {
      const RunResults r = read_run_results(f, /*with_curves=*/false);
      set.ignored.push_back(f + ": not a run of this campaign (" + r.run_name + ", run id " + r.run_id + ")");
    } catch (const Error& e) {
      set.ignored.push_back(e.what());
    }
  }
  return set;
}

std::vector<RunPlan> Campaign::plans(bool pilot_only) const {
  std::vector<RunPlan> out;
  for (const auto& m : runs(pilot_only)) out.push_back(plan_run(m));
  return out;
}

std::string Campaign::read_result(const RunPlan& p) const {
  for (const auto& dir : read_dirs)
    if (std::string f = find_results(dir, p.name, p.run_id); !f.empty()) return f;
  return "";
}

std::vector<std::string> campaign_files(const std::string& dir) {
  std::vector<std::string> files, out;
  walk_files(dir, "campaign.toml", files);
  for (const auto& f : files)
    if (f.size() >= 14 && f.compare(f.size() - 14, 14, "/campaign.toml") == 0) out.push_back(f);
  std::sort(out.begin(), out.end());
  return out;
}

void write_seed_plan(const Campaign& c, const SeedPlan& plan) {
  if (file_exists(c.seeds_path())) throw Error(c.seeds_path() + ": the seeds were decided already; remove the file to decide them again");
  std::ostringstream os;
  os.precision(6);
  os << "# The seeds of campaign " << c.name << ", set once from its pilot's runs (seeds 1-" << c.seeds.pilot << ") by the rule that " << c.path
     << "\n# registered before any run: for each claim the fewest seeds whose minimal detectable difference (alpha " << c.registration.alpha
     << ", power " << c.registration.power << ", at the pilot's paired sd) reaches the claim's registered effect (the paper's, or its effect of interest), within [" << c.seeds.min << ", " << c.seeds.max
     << "]; a model takes the most any of its claims asks for. Written by `ufp4 campaign run`.\n";
  os << "pilot = " << c.seeds.pilot << "\n\n[models]\n";
  for (const auto& [model, n] : plan.seeds) os << toml_key(model) << " = " << n << "\n";
  os << "\n";
  for (const auto& [claim, sd] : plan.pilot_sd)
    os << "[claims." << toml_key(claim) << "]\npilot_sd = " << sd << "  # percentage points\nseeds_for_power = " << plan.seeds_for_power.at(claim) << "\n\n";
  make_dirs(c.results_dir);
  write_text_atomically(c.seeds_path(), os.str());
}

}  // namespace ufp4
