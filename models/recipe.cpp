#include "models/recipe.h"

#include <atomic>

#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <toml++/toml.h>

#include "common/error.h"
#include "common/fs.h"
#include "common/toml_util.h"
#include "common/text.h"

namespace ufp4 {

const char* gemm_key(Gemm g) {
  static const char* k[] = {"fprop", "dgrad", "wgrad"};
  return k[static_cast<int>(g)];
}
const char* gemm_paper_name(Gemm g) {
  static const char* k[] = {"fwd_y", "bwd_dx", "bwd_dw"};
  return k[static_cast<int>(g)];
}
const char* operand_key(Gemm g, int slot) {
  static const char* k[3][2] = {{"x", "w"}, {"dy", "w"}, {"dy", "x"}};
  return k[static_cast<int>(g)][slot];
}

bool Recipe::quantizes_anything() const {
  for (const auto& g : gemm)
    for (const auto& o : g.op)
      if (o.quantize) return true;
  return false;
}

namespace {

std::string where(const std::string& file, const toml::node& n) {
  return file + ":" + std::to_string(n.source().begin.line);
}

[[noreturn]] void bad(const std::string& file, const toml::node& n, const std::string& key, const std::string& msg) {
  throw Error(where(file, n) + ": " + key + ": " + msg);
}

const std::set<std::string> kTopKeys = {"name", "description", "extends", "seed", "rht_signs", "gemm", "defaults",
                                        "fprop", "dgrad", "wgrad", "layers"};
const std::set<std::string> kOperandKeys = {"quantize", "grid", "max_fpx", "block", "scale", "rounding", "block_2d"};
const std::set<std::string> kLayerKeys = {"bf16", "bf16_first_blocks", "bf16_last_blocks"};

void check_keys(const std::string& file, const toml::table& t, const std::set<std::string>& allowed, const std::string& prefix) {
  for (auto&& [k, v] : t) {
    std::string key(k.str());
    if (!allowed.count(key)) bad(file, v, prefix + key, "unknown key (allowed: " + join(allowed, ", ") + ")");
  }
}

void expect(const std::string& file, const toml::node& n, const std::string& key, bool ok, const std::string& type) {
  if (!ok) bad(file, n, key, "expected " + type);
}

// Checks one file's table before it is merged, so that errors point at the file that has them.
void validate_operand(const std::string& file, const toml::table& t, const std::string& prefix) {
  check_keys(file, t, kOperandKeys, prefix);
  for (auto&& [k, v] : t) {
    std::string key = prefix + std::string(k.str());
    std::string kk(k.str());
    if (kk == "quantize" || kk == "block_2d") expect(file, v, key, v.is_boolean(), "true or false");
    if (kk == "grid") expect(file, v, key, v.is_string() || v.is_array(), "a grid name or an array of magnitudes");
    if (kk == "max_fpx") expect(file, v, key, v.is_number(), "a number (allowed: 2, 3, 4, 6)");
    if (kk == "block") expect(file, v, key, v.is_integer(), "an integer (allowed: 16, 32, 64, 128)");
    if (kk == "scale") expect(file, v, key, v.is_string(), "a string (allowed: fp32, nvfp4, mx)");
    if (kk == "rounding") expect(file, v, key, v.is_string(), "a string (allowed: rtne, sr)");
  }
}

void validate_file(const std::string& file, const toml::table& t) {
  check_keys(file, t, kTopKeys, "");
  for (const char* s : {"name", "description", "extends", "rht_signs", "gemm"})
    if (auto n = t.get(s)) expect(file, *n, s, n->is_string(), "a string");
  if (auto n = t.get("seed")) expect(file, *n, "seed", n->is_integer(), "an integer");
  if (auto n = t.get("rht_signs")) {
    std::string v = n->value_or<std::string>("");
    if (v != "shared" && v != "per_layer" && v != "per_step") bad(file, *n, "rht_signs", "'" + v + "' (allowed: shared, per_layer, per_step)");
  }
  if (auto n = t.get("gemm")) {
    std::string v = n->value_or<std::string>("");
    if (v != "bf16" && v != "fp32") bad(file, *n, "gemm", "'" + v + "' (allowed: bf16, fp32)");
  }
  if (auto n = t.get("defaults")) {
    expect(file, *n, "defaults", n->is_table(), "a table");
    validate_operand(file, *n->as_table(), "defaults.");
  }
  for (Gemm g : kGemms) {
    auto n = t.get(gemm_key(g));
    if (!n) continue;
    std::string gk = gemm_key(g);
    expect(file, *n, gk, n->is_table(), "a table");
    std::set<std::string> allowed = {"rht", operand_key(g, 0), operand_key(g, 1)};
    check_keys(file, *n->as_table(), allowed, gk + ".");
    for (auto&& [k, v] : *n->as_table()) {
      std::string key = gk + "." + std::string(k.str());
      if (k.str() == "rht") {
        expect(file, v, key, v.is_integer(), "an integer (allowed: 0, 16, 32, 64, 128)");
        int64_t r = v.value_or<int64_t>(-1);
        if (r != 0 && r != 16 && r != 32 && r != 64 && r != 128) bad(file, v, key, std::to_string(r) + " (allowed: 0, 16, 32, 64, 128)");
      } else {
        expect(file, v, key, v.is_table(), "a table of operand settings");
        validate_operand(file, *v.as_table(), key + ".");
      }
    }
  }
  if (auto n = t.get("layers")) {
    expect(file, *n, "layers", n->is_table(), "a table");
    check_keys(file, *n->as_table(), kLayerKeys, "layers.");
    for (auto&& [k, v] : *n->as_table()) {
      std::string key = "layers." + std::string(k.str());
      if (k.str() == "bf16") {
        bool ok = v.is_array();
        if (ok) for (auto&& e : *v.as_array()) ok = ok && e.is_string();
        expect(file, v, key, ok, "an array of name patterns");
      } else {
        expect(file, v, key, v.is_integer() && v.value_or<int64_t>(-1) >= 0, "a non-negative integer");
      }
    }
  }
}

bool readable(const std::string& p) { return access(p.c_str(), R_OK) == 0; }

std::string find_recipe(const std::string& name, const std::string& relative_to) {
  if (name.find('/') != std::string::npos || (name.size() > 5 && name.compare(name.size() - 5, 5, ".toml") == 0)) {
    std::string p = name;
    if (!readable(p) && !relative_to.empty() && name[0] != '/') p = relative_to + "/" + name;
    if (!readable(p)) throw Error("recipe: file '" + name + "' not found");
    return p;
  }
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("UFP4_RECIPES")) dirs.push_back(env);
  if (!relative_to.empty()) dirs.push_back(relative_to);
  if (const std::string root = repository_root(); !root.empty()) dirs.push_back(root + "/models/recipes");
  for (const auto& d : dirs)
    if (readable(d + "/" + name + ".toml")) return d + "/" + name + ".toml";
  std::string allowed;
  for (const auto& n : Recipe::preset_names()) allowed += (allowed.empty() ? "" : ", ") + n;
  if (repository_root().empty() && !std::getenv("UFP4_RECIPES"))
    throw Error("recipe: '" + name + "': recipes by name are found in the ufp4 checkout the command runs in, and there is none here or above "
                "(run from a checkout, set UFP4_RECIPES to a folder of recipes, or give a path to a .toml file)");
  throw Error("recipe: unknown recipe '" + name + "' (allowed: " + allowed + ", or a path to a .toml file)");
}

// The recipe's table with its `extends` chain (a preset name or a path) merged in. A parent's name
// and description are its own: a child does not inherit them.
toml::table load_merged(const std::string& name, std::vector<std::string>& chain, SourceMap& sources) {
  ExtendsRules rules;
  rules.parent_of = [](const toml::node& v, const std::string& child, const std::string& where) {
    try {
      return find_recipe(v.value_or<std::string>(""), child.substr(0, child.find_last_of('/')));
    } catch (const Error& e) {
      const std::string msg = e.what();
      if (msg.rfind("recipe:", 0) == 0) throw Error(where + ": extends: " + msg.substr(8));
      throw;
    }
  };
  rules.check = validate_file;
  rules.not_inherited = {"name", "description"};
  return load_extends_chain(find_recipe(name, ""), rules, chain, sources);
}

// Where an operand field was written: the operand's own table, else [defaults], else its GEMM table.
std::string operand_source(const SourceMap& sources, const std::string& key, const std::string& field, const std::string& file) {
  for (const std::string& k : {key + "." + field, "defaults." + field})
    if (sources.count(k)) return source_of(sources, k, file) + ": " + k;
  return source_of(sources, key, file) + ": " + key;
}

// The field an operand error is about: the word its message starts with ("grid", "block", ...).
std::string error_field(const std::string& msg) {
  const size_t end = msg.find_first_of(": '");
  return msg.substr(0, end);
}

// "<where>: <key>: <message>", without the message's own "<field>: " when the key already names it.
std::string located(const std::string& where_and_key, const std::string& msg) {
  const std::string field = error_field(msg);
  const bool named = msg.compare(0, field.size() + 2, field + ": ") == 0 &&
                     where_and_key.size() > field.size() && where_and_key.compare(where_and_key.size() - field.size(), field.size(), field) == 0;
  return where_and_key + ": " + (named ? msg.substr(field.size() + 2) : msg);
}

OperandRecipe make_operand(const toml::table* defaults, const toml::table* own, const std::string& file, const std::string& key,
                           const SourceMap& sources) {
  toml::table t;
  if (defaults) t = *defaults;
  if (own) toml_merge(t, *own);
  OperandRecipe o;
  o.quantize = t["quantize"].value_or(false);
  try {
    double max_fpx = t["max_fpx"].value_or(0.0);
    if (auto g = t["grid"].as_array()) {
      std::string list;
      for (auto&& e : *g) list += (list.empty() ? "" : ",") + std::to_string(e.value_or(0.0));
      o.spec.grid = Grid::parse(list);
    } else {
      o.spec.grid = Grid::parse(t["grid"].value_or<std::string>("e2m1"), max_fpx);
    }
    o.spec.block = static_cast<int>(t["block"].value_or<int64_t>(16));
    o.spec.scale = parse_scale_kind(t["scale"].value_or<std::string>("fp32"));
    o.spec.rounding = parse_rounding(t["rounding"].value_or<std::string>("rtne"));
    o.spec.block_2d = t["block_2d"].value_or(false);
  } catch (const Error& e) {
    throw Error(located(operand_source(sources, key, error_field(e.what()), file), e.what()));
  }
  return o;
}

std::string grid_label(const OperandRecipe& o) { return o.spec.grid.label(); }

std::string scale_label(ScaleKind k) {
  switch (k) {
    case ScaleKind::kFp32: return "FP32 single-level";
    case ScaleKind::kNvfp4: return "E4M3 + FP32 two-level";
    case ScaleKind::kMx: return "E8M0 (MX)";
    case ScaleKind::kUnit: return "none (unit)";
  }
  return "?";
}

}  // namespace

std::vector<std::string> Recipe::preset_names() { return {"bf16", "e2m1_ref", "ufp4", "ufp4_int4", "nvfp4_nvidia", "mxfp4"}; }

namespace {
std::atomic<int64_t> g_recipe_loads{0};
}  // namespace

int64_t Recipe::loads() { return g_recipe_loads; }

Recipe Recipe::load(const std::string& name_or_path) {
  ++g_recipe_loads;
  std::vector<std::string> chain;
  SourceMap sources;
  toml::table t = load_merged(name_or_path, chain, sources);
  const std::string file = chain.front();
  Recipe r;
  for (const auto& c : chain) r.source += (r.source.empty() ? "" : " <- ") + c;
  r.name = t["name"].value_or(std::string(name_or_path));
  r.description = t["description"].value_or<std::string>("");
  r.seed = static_cast<uint64_t>(t["seed"].value_or<int64_t>(0));
  r.rht_signs = t["rht_signs"].value_or<std::string>("shared");
  r.gemm_precision = t["gemm"].value_or<std::string>("bf16");
  const toml::table* defaults = t["defaults"].as_table();
  for (Gemm g : kGemms) {
    const toml::table* gt = t[gemm_key(g)].as_table();
    GemmRecipe& gr = r.at(g);
    gr.rht = gt ? static_cast<int>((*gt)["rht"].value_or<int64_t>(0)) : 0;
    for (int s = 0; s < 2; ++s) {
      const toml::table* own = gt ? (*gt)[operand_key(g, s)].as_table() : nullptr;
      std::string key = std::string(gemm_key(g)) + "." + operand_key(g, s);
      gr.op[s] = make_operand(defaults, own, file, key, sources);
      gr.op[s].spec.rht = gr.rht;
      try {
        if (gr.op[s].quantize) gr.op[s].spec.validate();
      } catch (const Error& e) {
        const std::string field = error_field(e.what());
        if (field == "rht") throw Error(located(source_of(sources, std::string(gemm_key(g)) + ".rht", file) + ": " + gemm_key(g) + ".rht", e.what()));
        throw Error(located(operand_source(sources, key, field, file), e.what()));
      }
    }
  }
  if (const toml::table* l = t["layers"].as_table()) {
    if (auto a = (*l)["bf16"].as_array())
      for (auto&& e : *a) r.bf16_layers.push_back(e.value_or<std::string>(""));
    r.bf16_first_blocks = static_cast<int>((*l)["bf16_first_blocks"].value_or<int64_t>(0));
    r.bf16_last_blocks = static_cast<int>((*l)["bf16_last_blocks"].value_or<int64_t>(0));
  }
  return r;
}

bool Recipe::layer_is_bf16(const std::string& layer_name, int layer_index, int n_layers) const {
  for (const auto& p : bf16_layers)
    if (fnmatch(p.c_str(), layer_name.c_str(), 0) == 0) return true;
  if (layer_index >= 0 && (layer_index < bf16_first_blocks || layer_index >= n_layers - bf16_last_blocks)) return true;
  return false;
}

std::string Recipe::to_toml() const {
  return "# resolved from " + source + "\nname = \"" + name + "\"\ndescription = \"" + description + "\"\n" + content();
}

std::string Recipe::content() const {
  std::ostringstream os;
  os << "seed = " << seed << "\nrht_signs = \"" << rht_signs
     << "\"\ngemm = \"" << gemm_precision << "\"\n";
  for (Gemm g : kGemms) {
    const GemmRecipe& gr = at(g);
    os << "\n[" << gemm_key(g) << "]   # " << gemm_paper_name(g) << "\nrht = " << gr.rht << "\n";
    for (int s = 0; s < 2; ++s) {
      const OperandRecipe& o = gr.op[s];
      os << operand_key(g, s) << " = { quantize = " << (o.quantize ? "true" : "false");
      if (o.quantize) {
        os << ", grid = \"" << o.spec.grid.name() << "\", block = " << o.spec.block << ", scale = \"" << to_string(o.spec.scale)
           << "\", rounding = \"" << to_string(o.spec.rounding) << "\", block_2d = " << (o.spec.block_2d ? "true" : "false");
      }
      os << " }\n";
    }
  }
  os << "\n[layers]\nbf16 = [";
  for (size_t i = 0; i < bf16_layers.size(); ++i) os << (i ? ", " : "") << "\"" << bf16_layers[i] << "\"";
  os << "]\nbf16_first_blocks = " << bf16_first_blocks << "\nbf16_last_blocks = " << bf16_last_blocks << "\n";
  return os.str();
}

std::vector<Recipe::Table1Row> Recipe::table1_rows(const std::vector<Recipe>& rs) {
  // Rows as in the paper's Table 1. Values summarize the resolved recipe; mixed settings are listed.
  auto uniq = [](std::vector<std::string> v) {
    std::vector<std::string> out;
    for (auto& s : v)
      if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
    std::string j;
    for (auto& s : out) j += (j.empty() ? "" : " / ") + s;
    return j.empty() ? std::string("-") : j;
  };
  std::vector<std::pair<std::string, std::vector<std::string>>> rows = {
      {"grid", {}}, {"quant block", {}}, {"scales", {}}, {"RHT scope", {}}, {"RHT size", {}}, {"SR scope", {}}, {"2D weight scaling", {}}};
  for (const Recipe& r : rs) {
    std::vector<std::string> grids, blocks, scales, rht_sizes;
    std::string rht_scope, sr_scope;
    bool two_d = false;
    bool dy_sr = r.at(Gemm::kDgrad).op[0].quantize && r.at(Gemm::kDgrad).op[0].spec.rounding == Rounding::kSr &&
                 r.at(Gemm::kWgrad).op[0].quantize && r.at(Gemm::kWgrad).op[0].spec.rounding == Rounding::kSr;
    if (dy_sr) sr_scope = "dY";
    static const char* sr_names[3][2] = {{"X_fprop", "W_fprop"}, {"dY_dgrad", "W_dgrad"}, {"dY_wgrad", "X_wgrad"}};
    for (Gemm g : kGemms) {
      const GemmRecipe& gr = r.at(g);
      if (gr.rht) {
        rht_scope += (rht_scope.empty() ? "" : ", ") + std::string(gemm_paper_name(g));
        rht_sizes.push_back(std::to_string(gr.rht));
      }
      for (int s = 0; s < 2; ++s) {
        const OperandRecipe& o = gr.op[s];
        if (!o.quantize) continue;
        grids.push_back(grid_label(o));
        blocks.push_back(o.spec.block_2d ? "16x16 (2D)" : "1x" + std::to_string(o.spec.block));
        scales.push_back(scale_label(o.spec.scale));
        two_d = two_d || o.spec.block_2d;
        bool is_dy = s == 0 && g != Gemm::kFprop;
        if (o.spec.rounding == Rounding::kSr && !(is_dy && dy_sr))
          sr_scope += (sr_scope.empty() ? "" : ", ") + std::string(sr_names[static_cast<int>(g)][s]);
      }
    }
    if (!r.quantizes_anything()) {
      for (auto& row : rows) row.second.push_back(row.first == "grid" ? "BF16 (none)" : "-");
      continue;
    }
    // 2D weights go with 1x16 elsewhere: report the activation/gradient block.
    std::vector<std::string> one_d;
    for (auto& b : blocks)
      if (b.find("2D") == std::string::npos) one_d.push_back(b);
    rows[0].second.push_back(uniq(grids));
    rows[1].second.push_back(uniq(one_d));
    rows[2].second.push_back(uniq(scales));
    rows[3].second.push_back(rht_scope.empty() ? "none" : rht_scope);
    rows[4].second.push_back(uniq(rht_sizes));
    rows[5].second.push_back(sr_scope.empty() ? "none" : sr_scope);
    rows[6].second.push_back(two_d ? "yes" : "no");
  }
  return rows;
}

std::string Recipe::table1(const std::vector<Recipe>& rs) {
  const std::vector<Table1Row> rows = table1_rows(rs);
  std::ostringstream os;
  os << "| |";
  for (const Recipe& r : rs) os << " " << r.name << " |";
  os << "\n|---|";
  for (size_t i = 0; i < rs.size(); ++i) os << "---|";
  os << "\n";
  for (const auto& row : rows) {
    os << "| " << row.first << " |";
    for (auto& v : row.second) os << " " << v << " |";
    os << "\n";
  }
  return os.str();
}

}  // namespace ufp4
