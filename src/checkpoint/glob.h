#pragma once
// Glob: a compiled fnmatch pattern (transform.h's glob_match), shared by the
// transforms, which compile each pattern once.

#include <string_view>
#include <utility>
#include <vector>

namespace ckpt::detail {

// One character of UTF-8 text at `position`, which moves past it; a byte
// that starts no valid sequence counts as one character.
char32_t next_character(std::string_view text, size_t& position);

// A compiled fnmatch pattern.
class Glob {
 public:
  explicit Glob(std::string_view pattern) {
    std::vector<char32_t> text;
    for (size_t position = 0; position < pattern.size();) text.push_back(next_character(pattern, position));
    for (size_t i = 0; i < text.size();) {
      const char32_t c = text[i++];
      if (c == '*') {
        if (tokens_.empty() || tokens_.back().kind != Token::kStar) tokens_.push_back({Token::kStar});
      } else if (c == '?') {
        tokens_.push_back({Token::kAny});
      } else if (c != '[' || !add_set(text, i)) {  // an unclosed '[' is itself
        tokens_.push_back({Token::kCharacter, c});
      }
    }
  }

  bool matches(std::string_view name) const {
    // Greedy, backing up to the last star: each star absorbs one more
    // character whenever what follows it fails.
    size_t token = 0, position = 0;
    size_t star_token = std::string_view::npos, star_position = 0;
    while (position < name.size()) {
      if (token < tokens_.size() && tokens_[token].kind == Token::kStar) {
        star_token = ++token;
        star_position = position;
        continue;
      }
      size_t next = position;
      if (token < tokens_.size() && matches_one(tokens_[token], next_character(name, next))) {
        ++token;
        position = next;
        continue;
      }
      if (star_token == std::string_view::npos) return false;
      token = star_token;
      next_character(name, star_position);
      position = star_position;
    }
    while (token < tokens_.size() && tokens_[token].kind == Token::kStar) ++token;
    return token == tokens_.size();
  }

 private:
  struct Token {
    enum Kind { kCharacter, kAny, kStar, kSet } kind;
    char32_t character = 0;
    size_t set = 0;
  };
  struct Set {
    bool negated = false;
    std::vector<std::pair<char32_t, char32_t>> ranges;  // inclusive; an empty one (z-a) matches nothing
  };

  // `[...]` starting after the '[' at text[i - 1], as fnmatch.translate
  // reads it: a ']' right after '[' or '[!' belongs to the set, "a-z" is a
  // range, '-' first or last is itself. Returns false (the '[' is then a
  // plain character) if the set is not closed.
  bool add_set(const std::vector<char32_t>& text, size_t& i) {
    size_t end = i;
    if (end < text.size() && text[end] == '!') ++end;
    if (end < text.size() && text[end] == ']') ++end;
    while (end < text.size() && text[end] != ']') ++end;
    if (end >= text.size()) return false;
    Set set;
    size_t k = i;
    if (text[k] == '!') {
      set.negated = true;
      ++k;
    }
    while (k < end) {
      if (k + 2 < end && text[k + 1] == '-') {
        set.ranges.emplace_back(text[k], text[k + 2]);
        k += 3;
      } else {
        set.ranges.emplace_back(text[k], text[k]);
        ++k;
      }
    }
    sets_.push_back(std::move(set));
    tokens_.push_back({Token::kSet, 0, sets_.size() - 1});
    i = end + 1;
    return true;
  }

  bool matches_one(const Token& token, char32_t c) const {
    switch (token.kind) {
      case Token::kCharacter: return c == token.character;
      case Token::kAny: return true;
      case Token::kSet: {
        const Set& set = sets_[token.set];
        bool in = false;
        for (const auto& [low, high] : set.ranges) in = in || (low <= c && c <= high);
        return in != set.negated;
      }
      case Token::kStar: break;
    }
    return false;
  }

  std::vector<Token> tokens_;
  std::vector<Set> sets_;
};

}  // namespace ckpt::detail
