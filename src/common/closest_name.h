// "Did you mean": the valid name nearest a mistyped one, for the errors that refuse an unknown
// config key, section or command.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace adacc {

// The candidate nearest `word` by edit distance (insertions, deletions, substitutions), if it is
// close enough to be a typo: at most max(2, |word| / 3) edits. The first of equally near ones.
std::optional<std::string> closest_name(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace adacc
