// Tests for parsing device lists and resolving them against a node's devices.
#include "core/device_selector.h"

#include <gtest/gtest.h>

#include "core/test_matchers.h"

namespace tessera {
namespace {

constexpr std::string_view kName = "TESSERA_VISIBLE_DEVICES";
constexpr std::string_view kUuid0 = "GPU-8a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9";
constexpr std::string_view kUuid1 = "GPU-00000000-1111-2222-3333-444444444444";
constexpr std::string_view kUuid2 = "GPU-abcdef01-2345-6789-abcd-ef0123456789";
constexpr std::string_view kMigUuid = "MIG-7b8c9d0e-1f2a-3b4c-5d6e-7f8091a2b3c4";

std::vector<int> Indices(const DeviceSelector& selector) {
  std::vector<int> out;
  for (const DeviceRef& device : selector.devices) {
    out.push_back(device.index);
  }
  return out;
}

DeviceSelector Parse(std::string_view text) {
  Result<DeviceSelector> result = ParseDeviceSelector(text, kName);
  EXPECT_TRUE(result.ok()) << result.error();
  return result.ok() ? *result : DeviceSelector();
}

TEST(DeviceSelectorTest, ParsesIndicesAndRangesInOrder) {
  EXPECT_EQ(Indices(Parse("0")), std::vector<int>({0}));
  EXPECT_EQ(Indices(Parse("0,2")), std::vector<int>({0, 2}));
  EXPECT_EQ(Indices(Parse("0-3")), std::vector<int>({0, 1, 2, 3}));
  EXPECT_EQ(Indices(Parse("1,3-5")), std::vector<int>({1, 3, 4, 5}));
  EXPECT_EQ(Indices(Parse("3,1")), std::vector<int>({3, 1}));
  EXPECT_EQ(Indices(Parse("2-2")), std::vector<int>({2}));
  EXPECT_EQ(Indices(Parse(" 0 , 5 - 6 ")), std::vector<int>({0, 5, 6}));
  EXPECT_EQ(Indices(Parse("63")), std::vector<int>({63}));
  EXPECT_EQ(Indices(Parse("007")), std::vector<int>({7}));
  EXPECT_EQ(Parse("0-63").devices.size(), 64u);
  EXPECT_FALSE(Parse("0").all);
}

TEST(DeviceSelectorTest, ParsesAll) {
  for (std::string_view text : {"all", "ALL", " All "}) {
    const DeviceSelector selector = Parse(text);
    EXPECT_TRUE(selector.all);
    EXPECT_TRUE(selector.devices.empty());
  }
}

TEST(DeviceSelectorTest, ParsesUuidsMixedWithIndices) {
  const DeviceSelector selector = Parse(std::string(kUuid0) + ",1," + std::string(kMigUuid) +
                                        ",GPU-ABCDEF01-2345-6789-ABCD-EF0123456789");
  ASSERT_EQ(selector.devices.size(), 4u);
  EXPECT_EQ(selector.devices[0].uuid, kUuid0);
  EXPECT_FALSE(selector.devices[0].by_index());
  EXPECT_EQ(selector.devices[1].index, 1);
  EXPECT_TRUE(selector.devices[1].uuid.empty());
  EXPECT_EQ(selector.devices[2].uuid, kMigUuid);
  EXPECT_EQ(selector.devices[3].uuid, "GPU-ABCDEF01-2345-6789-ABCD-EF0123456789");
}

TEST(DeviceSelectorTest, ToStringParsesBackToTheSameSelector) {
  for (std::string_view text :
       {"all", "0", "3,1-2", "1,GPU-8a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"}) {
    const DeviceSelector selector = Parse(text);
    EXPECT_EQ(Parse(selector.ToString()), selector) << text;
  }
  EXPECT_EQ(Parse("3,1-2").ToString(), "3,1,2");
}

struct Rejected {
  std::string_view text;
  std::string_view reason;
};

class DeviceSelectorRejectsTest : public ::testing::TestWithParam<Rejected> {};

TEST_P(DeviceSelectorRejectsTest, RejectsNamingInputValueAndItem) {
  EXPECT_TRUE(IsRejected(ParseDeviceSelector(GetParam().text, kName), kName, GetParam().text,
                         {GetParam().reason, "; expected all, or a comma list of device indices"}));
}

INSTANTIATE_TEST_SUITE_P(
    BadLists, DeviceSelectorRejectsTest,
    ::testing::Values(
        Rejected{"", "empty value"}, Rejected{" ", "empty value"},
        Rejected{"0,0", "item 2 (\"0\") names device 0 a second time"},
        Rejected{"0-3,2", "item 2 (\"2\") names device 2 a second time"},
        Rejected{"1,0-2", "item 2 (\"0-2\") names device 1 a second time"},
        Rejected{"3-1", "item 1 (\"3-1\") is a reversed range; write 1-3"},
        Rejected{"abc", "item 1 (\"abc\") is not a device index, range or UUID"},
        Rejected{"0,x", "item 2 (\"x\") is not a device index"},
        Rejected{"1-", "item 1 (\"1-\") is not a device index"},
        Rejected{"-3", "negative indices are not allowed"},
        Rejected{"1-2-3", "is not a device index"}, Rejected{"0,,1", "item 2 is empty"},
        Rejected{"0,", "item 2 is empty"}, Rejected{",0", "item 1 is empty"},
        Rejected{"64", "item 1 (\"64\") is above the largest device index, 63"},
        Rejected{"0-64", "is above the largest device index"},
        Rejected{"99999999999999999999", "is above the largest device index"},
        Rejected{"all,0", "item 1 (\"all\"): \"all\" cannot be combined"},
        Rejected{"0,all", "item 2 (\"all\"): \"all\" cannot be combined"},
        Rejected{"GPU-123", "is not a device UUID"},
        Rejected{"GPU-8a1b2c3d-4e5f-6071-8293-a4b5c6d7e8fz", "is not a device UUID"},
        Rejected{"GPU-8a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9a", "is not a device UUID"},
        Rejected{"GPU-8a1b2c3d4e5f-6071-8293-a4b5c6d7e8f9", "is not a device UUID"},
        Rejected{"gpu-8a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9", "is not a device UUID"},
        Rejected{"GPU-8a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9,gpu-8a1b2c3d-4e5f-6071-8293-"
                 "a4b5c6d7e8f9",
                 "is not a device UUID"},
        Rejected{"GPU-8a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9,GPU-8A1B2C3D-4E5F-6071-8293-"
                 "A4B5C6D7E8F9",
                 "names a device already listed"},
        Rejected{"0 1", "is not a device index"}));

TEST(DeviceSelectorTest, RejectsMoreThan64Items) {
  std::string text = "0";
  for (int i = 0; i < 64; ++i) {
    text += ",0";
  }
  EXPECT_TRUE(IsRejected(ParseDeviceSelector(text, kName), kName, text,
                         {"65 items; at most 64 are allowed"}));
}

const std::vector<std::string> kNode = {std::string(kUuid0), std::string(kUuid1),
                                        std::string(kUuid2)};

std::vector<int> Resolve(std::string_view text) {
  Result<std::vector<int>> result = ResolveDeviceSelector(Parse(text), kNode, kName);
  EXPECT_TRUE(result.ok()) << result.error();
  return result.ok() ? *result : std::vector<int>();
}

TEST(ResolveDeviceSelectorTest, MapsIndicesAndUuidsToPhysicalIndicesInOrder) {
  EXPECT_EQ(Resolve("all"), std::vector<int>({0, 1, 2}));
  EXPECT_EQ(Resolve("2,0"), std::vector<int>({2, 0}));
  EXPECT_EQ(Resolve("0-2"), std::vector<int>({0, 1, 2}));
  EXPECT_EQ(Resolve(std::string(kUuid2) + ",0"), std::vector<int>({2, 0}));
  EXPECT_EQ(Resolve("GPU-00000000-1111-2222-3333-444444444444"), std::vector<int>({1}));
  EXPECT_EQ(Resolve("GPU-ABCDEF01-2345-6789-ABCD-EF0123456789"), std::vector<int>({2}));
}

TEST(ResolveDeviceSelectorTest, AllOfNoDevicesIsEmpty) {
  Result<std::vector<int>> result = ResolveDeviceSelector(DeviceSelector::All(), {}, kName);
  ASSERT_TRUE(result.ok()) << result.error();
  EXPECT_TRUE(result->empty());
}

TEST(ResolveDeviceSelectorTest, RejectsIndicesTheNodeDoesNotHave) {
  EXPECT_TRUE(IsRejected(ResolveDeviceSelector(Parse("0,5"), kNode, kName), kName, "0,5",
                         {"device 5 does not exist; this node has 3 devices (indices 0-2)"}));
  EXPECT_TRUE(IsRejected(ResolveDeviceSelector(Parse("1"), {std::string(kUuid0)}, kName), kName,
                         "1", {"device 1 does not exist; this node has 1 device (index 0)"}));
  EXPECT_TRUE(IsRejected(ResolveDeviceSelector(Parse("0"), {}, kName), kName, "0",
                         {"device 0 does not exist; this node has no devices"}));
}

TEST(ResolveDeviceSelectorTest, RejectsUnknownUuids) {
  EXPECT_TRUE(IsRejected(ResolveDeviceSelector(Parse(kMigUuid), kNode, kName), kName, kMigUuid,
                         {"no device has UUID MIG-7b8c9d0e", "this node has 3 devices"}));
}

TEST(ResolveDeviceSelectorTest, RejectsTheSameDeviceByIndexAndByUuid) {
  const std::string text = "0," + std::string(kUuid0);
  EXPECT_TRUE(IsRejected(ResolveDeviceSelector(Parse(text), kNode, kName), kName, text,
                         {"device 0 is selected twice (as 0 and as GPU-8a1b2c3d"}));
  const std::string text2 = std::string(kUuid1) + ",1";
  EXPECT_TRUE(IsRejected(ResolveDeviceSelector(Parse(text2), kNode, kName), kName, text2,
                         {"device 1 is selected twice (as GPU-00000000"}));
}

}  // namespace
}  // namespace tessera
