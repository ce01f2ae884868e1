// Cache keys: every field of the preimage counts, and the encoding is unambiguous.
#include <catch2/catch.hpp>

#include <cctype>

#include "key.h"

using rt_moe::cache::Key;
using rt_moe::cache::Preimage;

TEST_CASE("cache key: same inputs give the same key, any change gives another", "[cache]") {
  auto make = [](std::string_view source, std::string_view arch) {
    return Preimage().add("source", source).add("arch", arch);
  };
  const Key base = make("kernel", "sm_90a").key();
  REQUIRE(make("kernel", "sm_90a").key() == base);
  REQUIRE_FALSE(make("kernel ", "sm_90a").key() == base);  // a field's value
  REQUIRE_FALSE(make("kernel", "sm_90").key() == base);
  REQUIRE_FALSE(Preimage().add("sourcE", "kernel").add("arch", "sm_90a").key() == base);  // a name
  REQUIRE_FALSE(Preimage().add("arch", "sm_90a").add("source", "kernel").key() == base);  // order
  REQUIRE_FALSE(make("kernel", "sm_90a").add("nvrtc", "").key() == base);  // an empty field
  REQUIRE_FALSE(Preimage().key() == base);
}

TEST_CASE("cache key: field boundaries are unambiguous", "[cache]") {
  REQUIRE_FALSE(Preimage().add("x", "ab").add("y", "c").key() ==
                Preimage().add("x", "a").add("y", "bc").key());
  REQUIRE_FALSE(Preimage().add("ab", "c").key() == Preimage().add("a", "bc").key());
  REQUIRE_FALSE(Preimage().add("a", "").add("", "b").key() == Preimage().add("a", "b").key());
  REQUIRE(Preimage().add("ab", "c").bytes() != Preimage().add("a", "bc").bytes());
}

TEST_CASE("cache key: the preimage starts with the schema version", "[cache]") {
  const std::string schema = Preimage().bytes();
  REQUIRE(schema.find("schema") != std::string::npos);
  REQUIRE(Preimage().add("source", "x").bytes().starts_with(schema));
}

TEST_CASE("cache key: hex is 32 lowercase digits, high word first", "[cache]") {
  const Key key{0x0123456789abcdefull, 0xfedcba9876543210ull};
  REQUIRE(key.hex() == "0123456789abcdeffedcba9876543210");
  REQUIRE(Key{}.hex() == std::string(32, '0'));
  const std::string hex = Preimage().add("source", "kernel").key().hex();
  REQUIRE(hex.size() == 32);
  for (char c : hex)
    REQUIRE((std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f')));
}
