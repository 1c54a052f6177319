// Small filesystem helpers shared by the CLI and the data tool.
#pragma once
#include <string>
#include <vector>

namespace ufp4 {

bool is_dir(const std::string& p);
bool ends_with(const std::string& s, const std::string& suffix);
bool file_exists(const std::string& p);
std::string real_path(const std::string& p);  // symlinks and .. resolved; "" when the path does not exist
std::string read_text_file(const std::string& p);  // throws ufp4::Error when unreadable
// Files under `dir` (recursive) ending in `ext`, skipping site-packages, dist-packages, __pycache__.
void walk_files(const std::string& dir, const std::string& ext, std::vector<std::string>& out);
// The names in a folder (not . and ..), in the order the system lists them; none when it cannot be read.
// (Not std::filesystem: LibTorch 2.11's library exports copies of it that the dynamic linker may bind.)
std::vector<std::string> dir_entries(const std::string& dir);
void make_dirs(const std::string& dir);  // mkdir -p; throws ufp4::RuntimeError when not writable
void write_text_atomically(const std::string& path, const std::string& text);
// Commands that write into committed folders (reports/, results/) by default replace a file only
// when told to: throws Error naming the file when `path` exists and `told` is false (the user gave
// neither --out nor --force). `command` names the command for the message.
void refuse_to_replace(const std::string& path, bool told, const std::string& command);
// Writes `text` to `path` unless the file already holds exactly it (then it is left untouched, its
// time included); returns whether it wrote. Same rule as refuse_to_replace for a file that differs.
bool write_text_if_changed(const std::string& path, const std::string& text, bool told, const std::string& command);
// The folder holding the running executable (for sibling tools).
std::string executable_dir();
// The ufp4 checkout the command runs in: the working folder or the nearest one above it that holds
// models/recipes/, experiments/ and CMakeLists.txt; "" when there is none. Recipes by name, reports
// and the benchmark's PyTorch peer are found there, never through the path the binary was built at,
// so a copied build works on the checkout it is run in.
std::string repository_root();
// A shell word that the shell reads back as exactly `s` (single-quoted).
std::string shell_quote(const std::string& s);
// The first line a shell command prints on stdout, without its line end; "" when it prints none.
std::string first_output_line(const std::string& command);

}  // namespace ufp4
