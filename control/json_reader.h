// A strict JSON reader (RFC 8259) for tests that read renderings back:
// rejects raw control characters, bad escapes, lone surrogates, invalid
// UTF-8, trailing commas and trailing text. Numbers are kept as text.
// Thread-compatible.
#ifndef RDMAPLANE_CONTROL_JSON_READER_H_
#define RDMAPLANE_CONTROL_JSON_READER_H_

#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace rdmaplane::control {

struct Json;
using JsonArray = std::vector<Json>;
using JsonObject = std::vector<std::pair<std::string, Json>>;  // in order

struct Json {
  // null, bool, number (kept as text), string, array, object
  std::variant<std::monostate, bool, std::string, std::shared_ptr<JsonArray>,
               std::shared_ptr<JsonObject>>
      value;
  bool is_number = false;

  bool IsString() const {
    return !is_number && std::holds_alternative<std::string>(value);
  }
  const std::string& Str() const { return std::get<std::string>(value); }
  uint64_t U64() const {
    EXPECT_TRUE(is_number);
    return std::strtoull(std::get<std::string>(value).c_str(), nullptr, 10);
  }
  const JsonArray& Array() const {
    return *std::get<std::shared_ptr<JsonArray>>(value);
  }
  const JsonObject& Object() const {
    return *std::get<std::shared_ptr<JsonObject>>(value);
  }
  bool IsNull() const { return std::holds_alternative<std::monostate>(value); }
  bool Has(const std::string& key) const {
    for (const auto& [k, v] : Object()) {
      if (k == key) return true;
    }
    return false;
  }
  const Json& operator[](const std::string& key) const {
    static const Json missing;
    for (const auto& [k, v] : Object()) {
      if (k == key) return v;
    }
    ADD_FAILURE() << "no key " << key;
    return missing;
  }
};

class JsonReader {
 public:
  explicit JsonReader(std::string_view text) : text_(text) {}

  // False (with error()) unless `text` is exactly one JSON value.
  bool Parse(Json* out) {
    SkipSpace();
    if (!Value(out, 0)) return false;
    SkipSpace();
    if (pos_ != text_.size()) return Fail("trailing characters");
    return true;
  }
  const std::string& error() const { return error_; }

 private:
  bool Fail(const std::string& why) {
    if (error_.empty()) error_ = why + " at offset " + std::to_string(pos_);
    return false;
  }
  void SkipSpace() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
            text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return Fail("bad literal");
    pos_ += word.size();
    return true;
  }
  bool Value(Json* out, int depth) {
    if (depth > 64) return Fail("too deep");
    if (pos_ >= text_.size()) return Fail("unexpected end");
    const char c = text_[pos_];
    if (c == '{') return ObjectValue(out, depth);
    if (c == '[') return ArrayValue(out, depth);
    if (c == '"') {
      std::string s;
      if (!String(&s)) return false;
      out->value = std::move(s);
      return true;
    }
    if (c == 't') {
      out->value = true;
      return Literal("true");
    }
    if (c == 'f') {
      out->value = false;
      return Literal("false");
    }
    if (c == 'n') return Literal("null");
    return Number(out);
  }
  bool Number(Json* out) {
    const size_t start = pos_;
    if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
    if (pos_ >= text_.size() || !isdigit(text_[pos_])) return Fail("number");
    if (text_[pos_] == '0' && pos_ + 1 < text_.size() &&
        isdigit(text_[pos_ + 1])) {
      return Fail("leading zero");
    }
    while (pos_ < text_.size() && isdigit(text_[pos_])) ++pos_;
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      if (pos_ >= text_.size() || !isdigit(text_[pos_]))
        return Fail("fraction");
      while (pos_ < text_.size() && isdigit(text_[pos_])) ++pos_;
    }
    out->value = std::string(text_.substr(start, pos_ - start));
    out->is_number = true;
    return true;
  }
  static void AppendUtf8(std::string* s, uint32_t cp) {
    if (cp < 0x80) {
      s->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      s->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      s->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      s->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  bool Hex4(uint32_t* v) {
    if (pos_ + 4 > text_.size()) return Fail("short \\u");
    *v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = text_[pos_++];
      *v <<= 4;
      if (h >= '0' && h <= '9') {
        *v |= h - '0';
      } else if (h >= 'a' && h <= 'f') {
        *v |= h - 'a' + 10;
      } else if (h >= 'A' && h <= 'F') {
        *v |= h - 'A' + 10;
      } else {
        return Fail("bad \\u digit");
      }
    }
    return true;
  }
  bool String(std::string* s) {
    ++pos_;  // the opening quote
    while (true) {
      if (pos_ >= text_.size()) return Fail("unterminated string");
      const auto c = static_cast<uint8_t>(text_[pos_++]);
      if (c == '"') return true;
      if (c < 0x20) return Fail("raw control character in string");
      if (c >= 0x80) {
        // Must be well-formed UTF-8 (no surrogates, no overlongs).
        int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC2 ? 1 : -1;
        if (n < 0 || c > 0xF4) return Fail("bad UTF-8 lead byte");
        uint32_t cp = c & (0x3F >> n);
        for (int i = 0; i < n; ++i) {
          if (pos_ >= text_.size()) return Fail("short UTF-8");
          const auto k = static_cast<uint8_t>(text_[pos_++]);
          if ((k & 0xC0) != 0x80) return Fail("bad UTF-8 continuation");
          cp = cp << 6 | (k & 0x3F);
        }
        if ((n == 2 && cp < 0x800) ||
            (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF)) {
          return Fail("bad UTF-8 sequence");
        }
        AppendUtf8(s, cp);
        continue;
      }
      if (c != '\\') {
        s->push_back(static_cast<char>(c));
        continue;
      }
      if (pos_ >= text_.size()) return Fail("short escape");
      const char e = text_[pos_++];
      switch (e) {
        case '"':
          s->push_back('"');
          break;
        case '\\':
          s->push_back('\\');
          break;
        case '/':
          s->push_back('/');
          break;
        case 'b':
          s->push_back('\b');
          break;
        case 'f':
          s->push_back('\f');
          break;
        case 'n':
          s->push_back('\n');
          break;
        case 'r':
          s->push_back('\r');
          break;
        case 't':
          s->push_back('\t');
          break;
        case 'u': {
          uint32_t cp = 0;
          if (!Hex4(&cp)) return false;
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t low = 0;
            if (text_.substr(pos_, 2) != "\\u") return Fail("lone surrogate");
            pos_ += 2;
            if (!Hex4(&low) || low < 0xDC00 || low > 0xDFFF) {
              return Fail("bad low surrogate");
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return Fail("lone low surrogate");
          }
          AppendUtf8(s, cp);
          break;
        }
        default:
          return Fail("bad escape");
      }
    }
  }
  bool ArrayValue(Json* out, int depth) {
    ++pos_;
    auto array = std::make_shared<JsonArray>();
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      out->value = array;
      return true;
    }
    while (true) {
      SkipSpace();
      Json item;
      if (!Value(&item, depth + 1)) return false;
      array->push_back(std::move(item));
      SkipSpace();
      if (pos_ >= text_.size()) return Fail("unterminated array");
      const char c = text_[pos_++];
      if (c == ']') break;
      if (c != ',') return Fail("expected , or ]");
    }
    out->value = array;
    return true;
  }
  bool ObjectValue(Json* out, int depth) {
    ++pos_;
    auto object = std::make_shared<JsonObject>();
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      out->value = object;
      return true;
    }
    while (true) {
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != '"') return Fail("key");
      std::string key;
      if (!String(&key)) return false;
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_++] != ':')
        return Fail("expected :");
      SkipSpace();
      Json value;
      if (!Value(&value, depth + 1)) return false;
      object->emplace_back(std::move(key), std::move(value));
      SkipSpace();
      if (pos_ >= text_.size()) return Fail("unterminated object");
      const char c = text_[pos_++];
      if (c == '}') break;
      if (c != ',') return Fail("expected , or }");
    }
    out->value = object;
    return true;
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::string error_;
};

// Parses `text`, failing the current test when it is not JSON.
inline Json ParseOrDie(const std::string& text) {
  Json j;
  JsonReader reader(text);
  EXPECT_TRUE(reader.Parse(&j)) << reader.error() << "\n" << text;
  return j;
}

}  // namespace rdmaplane::control

#endif  // RDMAPLANE_CONTROL_JSON_READER_H_
