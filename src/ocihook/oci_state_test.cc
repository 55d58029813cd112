// The OCI state a hook reads: what podman 4.3 + runc 1.1 hand a createRuntime hook is accepted,
// anything without a usable pid is refused with a message that says why.
#include "ocihook/oci_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tessera::ocihook {
namespace {

using ::testing::HasSubstr;

TEST(ParseOciState, ReadsWhatRuncGivesACreateRuntimeHook) {
  // As captured from podman 4.3.1 + runc 1.1.5 on these machines.
  auto state = ParseOciState(
      R"({"ociVersion":"1.0.2-dev","id":"b51892869d3aa6e3e93ffc28d5d030d4e24bec74e4af52bbec989e366abc0c1f","status":"creating","pid":19243,"bundle":"/var/lib/containers/storage/overlay-containers/b5/userdata","annotations":{"io.container.manager":"libpod"}})");
  ASSERT_TRUE(state.ok()) << state.error();
  EXPECT_EQ(state->pid, 19243);
  EXPECT_EQ(state->status, "creating");
  EXPECT_EQ(RuntimeIdLabel(state->id), state->id);
}

TEST(ParseOciState, RefusesStatesWithoutAUsablePid) {
  for (const char* text :
       {R"({"id":"x","status":"stopped"})", R"({"id":"x","pid":0})", R"({"id":"x","pid":-4})",
        R"({"id":"x","pid":"12"})", R"({"id":"x","pid":4294967296})"}) {
    auto state = ParseOciState(text);
    ASSERT_FALSE(state.ok()) << text;
    EXPECT_THAT(state.error(), HasSubstr("no positive \"pid\"")) << text;
  }
  EXPECT_THAT(ParseOciState("not json").error(), HasSubstr("not a JSON object"));
  EXPECT_THAT(ParseOciState("[1]").error(), HasSubstr("not a JSON object"));
  EXPECT_THAT(ParseOciState(R"({"pid":5})").error(), HasSubstr("no \"id\""));
  EXPECT_THAT(ParseOciState(std::string(kMaxStateBytes + 1, ' ')).error(),
              HasSubstr("expected at most"));
}

TEST(RuntimeIdLabel, KeepsOnlyWhatTheProtocolCarries) {
  EXPECT_EQ(RuntimeIdLabel("abc-1.2_x"), "abc-1.2_x");
  EXPECT_EQ(RuntimeIdLabel("has space"), "");
  EXPECT_EQ(RuntimeIdLabel("a=b"), "");
  EXPECT_EQ(RuntimeIdLabel(std::string(129, 'a')), "");
}

}  // namespace
}  // namespace tessera::ocihook
