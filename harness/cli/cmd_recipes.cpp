// `ufp4 recipes`: list presets, print one recipe fully resolved, or several as paper Table 1.
#include <iostream>

#include "common/error.h"
#include "harness/cli/cli.h"
#include "models/recipe.h"

namespace ufp4 {

int cmd_recipes(const std::vector<std::string>& args) {
  std::vector<std::string> names;
  po::options_description d("options");
  d.add_options()
      ("names", po::value(&names)->multitoken(), "recipe names (presets) or .toml paths")
      ("table", po::bool_switch(), "paper Table 1 rows even for a single recipe")
      ("resolved", po::bool_switch(), "every field of every recipe, even when several are named");
  po::positional_options_description pos;
  pos.add("names", -1);
  auto vm = parse_command("recipes", "[NAME ...]   (none: list presets; one: resolved; several: Table 1)", d, args, &pos);
  if (!vm) return 0;
  if (names.empty()) {
    for (const auto& n : Recipe::preset_names()) {
      Recipe r = Recipe::load(n);
      std::cout << n << std::string(14 - std::min<size_t>(13, n.size()), ' ') << r.description << "\n";
    }
    return 0;
  }
  std::vector<Recipe> rs;
  for (const auto& n : names) rs.push_back(Recipe::load(n));
  if (rs.size() == 1 && !(*vm)["table"].as<bool>()) {
    std::cout << rs[0].to_toml();
    return 0;
  }
  if ((*vm)["resolved"].as<bool>())
    for (const auto& r : rs) std::cout << r.to_toml() << "\n";
  std::cout << Recipe::table1(rs);
  return 0;
}

}  // namespace ufp4
