#include "agent/device_filter.h"

#include <gtest/gtest.h>

namespace gpupool::agent {
namespace {

constexpr uint32_t kRead = 2, kWrite = 4, kMknod = 1;

TEST(DeviceFilterTest, DeniesExactlyTheListedDevices) {
  const std::vector<DeviceNumber> deny = {{'c', 195, 0}, {'c', 195, 3}, {'b', 8, 1}};
  auto prog = BuildDeviceFilter(deny);
  ASSERT_TRUE(prog.ok()) << prog.status().ToString();
  EXPECT_EQ(prog->size(), 4u + 5u * deny.size() + 2u);
  for (const DeviceNumber& d : deny) {
    for (uint32_t access : {kRead, kWrite, kMknod, kRead | kWrite | kMknod}) {
      EXPECT_EQ(EvaluateDeviceFilter(*prog, d, access).value(), 0)
          << d.type << " " << d.major << ":" << d.minor << " access " << access;
    }
  }
  // Neighbours differ in one field only: type, major or minor.
  for (DeviceNumber d : std::vector<DeviceNumber>{{'c', 195, 1},
                                                  {'c', 195, 255},
                                                  {'c', 196, 0},
                                                  {'b', 195, 0},
                                                  {'c', 8, 1},
                                                  {'b', 8, 0},
                                                  {'c', 1, 3}}) {
    EXPECT_EQ(EvaluateDeviceFilter(*prog, d, kRead | kWrite).value(), 1)
        << d.type << " " << d.major << ":" << d.minor;
  }
}

TEST(DeviceFilterTest, EmptyListAllowsEverything) {
  auto prog = BuildDeviceFilter({});
  ASSERT_TRUE(prog.ok());
  EXPECT_EQ(EvaluateDeviceFilter(*prog, {'c', 195, 0}, kRead).value(), 1);
}

TEST(DeviceFilterTest, BadInputIsAnErrorNamingIt) {
  auto bad_type = BuildDeviceFilter({{'x', 1, 1}});
  ASSERT_FALSE(bad_type.ok());
  EXPECT_NE(bad_type.status().message().find("'x'"), std::string::npos);
  auto huge = BuildDeviceFilter({{'c', 0x80000000u, 0}});
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("out of range"), std::string::npos);
  std::vector<DeviceNumber> many(kMaxDeniedDevices + 1, DeviceNumber{'c', 1, 1});
  auto too_many = BuildDeviceFilter(many);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("at most"), std::string::npos);
  // The evaluator refuses what it does not know instead of guessing.
  std::vector<BpfInsn> unknown = {{0xff, 0, 0, 0}};
  EXPECT_FALSE(EvaluateDeviceFilter(unknown, {'c', 1, 1}, kRead).ok());
  EXPECT_FALSE(EvaluateDeviceFilter({}, {'c', 1, 1}, kRead).ok());
}

TEST(DeviceFilterTest, DeviceNumberOfNodesAndNonNodes) {
  auto zero = DeviceNumberOf("/dev/zero");
  ASSERT_TRUE(zero.ok()) << zero.status().ToString();
  EXPECT_EQ(*zero, (DeviceNumber{'c', 1, 5}));
  EXPECT_EQ(DeviceNumberOf("/etc/passwd").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DeviceNumberOf("/no/such/node").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace gpupool::agent
