// The layering written in each folder's README ("Depends on: ...") is the
// layering of the code: every `#include "<area>/..."` of a folder must name the
// folder itself or an area its README allows, and a folder whose README does
// not name LibTorch includes none of its headers. And the files a README's
// tables name exist (a moved file leaves no stale row behind).
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fptrain::layout {
namespace {
namespace fs = std::filesystem;

const fs::path kRoot = FPTRAIN_SOURCE_DIR;

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Top-level folders that build something: the areas an include may name.
std::set<std::string> areas() {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(kRoot))
    if (e.is_directory() && fs::exists(e.path() / "CMakeLists.txt") && e.path().filename() != "build")
      out.insert(e.path().filename().string());
  return out;
}

struct Rule {
  std::string sentence;           // the README's "Depends on: ..." sentence
  std::set<std::string> allowed;  // areas it names
  bool libtorch = false;
  bool everything = false;        // "every library of the project"
};

// The sentence from "Depends on:" to the first full stop that ends it.
std::optional<Rule> rule_of(const std::string& area, const std::set<std::string>& all) {
  const std::string readme = read_file(kRoot / area / "README.md");
  const size_t at = readme.find("Depends on:");
  if (at == std::string::npos) return std::nullopt;
  size_t end = at;
  int depth = 0;
  for (; end < readme.size(); ++end) {
    const char c = readme[end];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == '.' && depth == 0 && (end + 1 == readme.size() || std::isspace(static_cast<unsigned char>(readme[end + 1]))))
      break;
  }
  Rule r;
  r.sentence = readme.substr(at, end - at);
  const std::string head = r.sentence.substr(0, r.sentence.find('('));  // areas come before the parenthesis
  for (const auto& a : all)
    if (std::regex_search(head, std::regex("\\b" + a + "\\b"))) r.allowed.insert(a);
  r.libtorch = r.sentence.find("LibTorch") != std::string::npos;
  r.everything = r.sentence.find("every library of the project") != std::string::npos;
  return r;
}

TEST(Layout, EveryAreaReadmeStatesItsDependencies) {
  for (const auto& a : areas()) {
    ASSERT_TRUE(fs::exists(kRoot / a / "README.md")) << a << "/ has no README.md";
    EXPECT_TRUE(rule_of(a, areas()).has_value()) << a << "/README.md has no 'Depends on:' line";
  }
}

TEST(Layout, IncludesFollowTheReadmes) {
  const std::set<std::string> all = areas();
  const std::regex project_include(R"re(^\s*#\s*include\s*"([a-z_]+)/)re");
  const std::regex torch_include(R"re(^\s*#\s*include\s*<(ATen|c10|torch)/)re");
  int checked = 0;
  for (const auto& area : all) {
    const auto rule = rule_of(area, all);
    if (!rule || rule->everything) continue;
    for (const auto& e : fs::recursive_directory_iterator(kRoot / area)) {
      const std::string ext = e.path().extension().string();
      if (ext != ".h" && ext != ".cpp" && ext != ".cu" && ext != ".cuh") continue;
      std::ifstream in(e.path());
      int line_no = 0;
      for (std::string line; std::getline(in, line);) {
        ++line_no;
        std::smatch m;
        const std::string where = fs::relative(e.path(), kRoot).string() + ":" + std::to_string(line_no);
        if (std::regex_search(line, m, project_include)) {
          const std::string target = m[1];
          if (!all.count(target) || target == area) continue;
          ++checked;
          EXPECT_TRUE(rule->allowed.count(target))
              << where << " includes " << target << "/, which " << area << "/README.md does not allow: \""
              << rule->sentence << "\"";
        } else if (std::regex_search(line, m, torch_include)) {
          ++checked;
          EXPECT_TRUE(rule->libtorch) << where << " includes a LibTorch header, which " << area
                                      << "/README.md does not allow: \"" << rule->sentence << "\"";
        }
      }
    }
  }
  EXPECT_GT(checked, 50);  // the scan found the includes
}

// The names in the first column of a README's table rows ("| `a.{h,cpp}` |",
// "| `b.*`, `c.h` |", "| `cuda/` |"), expanded: {x,y} alternatives; `name.*`
// stands for any file that starts with "name.".
std::vector<std::string> table_names(const std::string& readme) {
  std::vector<std::string> out;
  std::istringstream lines(readme);
  std::string line;
  const std::regex code("`([^`]+)`");
  while (std::getline(lines, line)) {
    if (line.rfind("| `", 0) != 0) continue;
    const std::string cell = line.substr(1, line.find('|', 1) - 1);
    for (std::sregex_iterator it(cell.begin(), cell.end(), code), end; it != end; ++it) {
      const std::string name = (*it)[1];
      const size_t open = name.find('{'), close = name.find('}');
      if (open == std::string::npos || close == std::string::npos) {
        out.push_back(name);
        continue;
      }
      std::istringstream alternatives(name.substr(open + 1, close - open - 1));
      for (std::string a; std::getline(alternatives, a, ',');)
        out.push_back(name.substr(0, open) + a + name.substr(close + 1));
    }
  }
  return out;
}

// Whether `name` (a file, a folder, or `prefix.*`) exists in `folder` or one of
// its subfolders (a README's table may list the files of a subfolder).
bool names_a_file(const fs::path& folder, const std::string& name) {
  const bool any_extension = name.size() > 2 && name.compare(name.size() - 2, 2, ".*") == 0;
  const std::string wanted = any_extension ? name.substr(0, name.size() - 1) : name;
  auto matches = [&](const fs::path& p) {
    const std::string rel = fs::relative(p, folder).string();
    if (rel.size() < wanted.size()) return false;
    const bool whole = rel.size() == wanted.size() || rel[rel.size() - wanted.size() - 1] == '/';
    if (!any_extension) return whole && rel.compare(rel.size() - wanted.size(), wanted.size(), wanted) == 0;
    const std::string file = p.filename().string(), stem = fs::path(wanted).filename().string();
    return file.rfind(stem, 0) == 0;
  };
  if (!any_extension && fs::exists(folder / name)) return true;
  for (auto it = fs::recursive_directory_iterator(folder); it != fs::recursive_directory_iterator(); ++it)
    if (matches(it->path())) return true;
  return false;
}

TEST(Layout, ReadmeTablesNameFilesThatExist) {
  int checked = 0;
  for (const auto& a : areas()) {
    for (auto it = fs::recursive_directory_iterator(kRoot / a); it != fs::recursive_directory_iterator(); ++it) {
      if (it->path().filename() != "README.md") continue;
      const fs::path folder = it->path().parent_path();
      for (const std::string& name : table_names(read_file(it->path()))) {
        // Only names that look like this folder's files (a path, or a name with an extension).
        if (name.find(' ') != std::string::npos || name.find('.') == std::string::npos) continue;
        if (name.find('/') == std::string::npos && name.find('.') == 0) continue;
        ++checked;
        EXPECT_TRUE(names_a_file(folder, name))
            << fs::relative(it->path(), kRoot).string() << " names `" << name << "`, which does not exist";
      }
    }
  }
  EXPECT_GT(checked, 50);  // the scan found the tables
}

}  // namespace
}  // namespace fptrain::layout
