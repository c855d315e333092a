#include "braid/program/origin.hpp"

#include <gtest/gtest.h>

#include <string>

namespace braid {
namespace {

TEST(Origin, TextRoundTripsAndUnknownTextIsNone) {
  for (Origin o : {Origin::Seed, Origin::Diff, Origin::Full, Origin::Cross, Origin::Migrant})
    EXPECT_EQ(origin_from(to_string(o)), o) << to_string(o);
  EXPECT_EQ(to_string(Origin::Migrant), "migrant");
  EXPECT_FALSE(origin_from("Seed").has_value());
  EXPECT_FALSE(origin_from("").has_value());
}

TEST(Origin, PatchFormsAreProposedSeedsAndMigrantsAreNot) {
  for (PatchType t : {PatchType::Diff, PatchType::Full, PatchType::Cross}) {
    EXPECT_EQ(to_string(origin_of(t)), to_string(t));
    EXPECT_TRUE(is_proposed(origin_of(t)));
  }
  EXPECT_FALSE(is_proposed(Origin::Seed));
  EXPECT_FALSE(is_proposed(Origin::Migrant));
  EXPECT_FALSE(is_proposed(std::string("migrant")));
  EXPECT_TRUE(is_proposed(std::string("cross")));
  EXPECT_TRUE(is_proposed(std::string("something newer")));
}

}  // namespace
}  // namespace braid
