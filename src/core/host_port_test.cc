// Tests for ParseHostPort / FormatHostPort: accepted forms and every rejection.
#include "core/host_port.h"

#include <gtest/gtest.h>

#include "core/test_matchers.h"

namespace tessera {
namespace {

TEST(ParseHostPort, ReadsIpv4Ipv6AndLocalhost) {
  auto v4 = ParseHostPort("127.0.0.1:9400", "--http");
  ASSERT_TRUE(v4.ok()) << v4.error();
  EXPECT_EQ(v4->host, "127.0.0.1");
  EXPECT_FALSE(v4->ipv6);
  EXPECT_EQ(v4->port, 9400);
  EXPECT_EQ(FormatHostPort(*v4), "127.0.0.1:9400");

  auto v6 = ParseHostPort("[::1]:0", "--http");
  ASSERT_TRUE(v6.ok()) << v6.error();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_TRUE(v6->ipv6);
  EXPECT_EQ(v6->port, 0);
  EXPECT_EQ(FormatHostPort(*v6), "[::1]:0");

  auto local = ParseHostPort("LocalHost:65535", "--http");
  ASSERT_TRUE(local.ok()) << local.error();
  EXPECT_EQ(local->host, "127.0.0.1");
  EXPECT_EQ(local->port, 65535);

  auto any = ParseHostPort(" 0.0.0.0:80 ", "--http");
  ASSERT_TRUE(any.ok()) << any.error();
  EXPECT_EQ(any->host, "0.0.0.0");
}

TEST(ParseHostPort, RejectsEachMistakeWithItsReason) {
  struct Case {
    const char* text;
    const char* reason;
  };
  const Case cases[] = {
      {"", "empty value"},
      {"127.0.0.1", "missing \":PORT\""},
      {":9400", "empty host"},
      {"127.0.0.1:", "empty port"},
      {"127.0.0.1:http", "port is not a number"},
      {"127.0.0.1:65536", "port 65536 is out of range"},
      {"127.0.0.1:99999999999999999999999", "port is out of range"},
      {"127.0.0.1:-1", "port is not a number"},
      {"example.com:80", "host names are not resolved"},
      {"256.1.1.1:80", "not an IPv4 address"},
      {"::1:80", "needs brackets"},
      {"[::1:80", "missing ']'"},
      {"[::1]80", "missing \":PORT\" after the IPv6"},
      {"[nonsense]:80", "not an IPv6 address"},
  };
  for (const Case& c : cases) {
    EXPECT_TRUE(IsRejected(ParseHostPort(c.text, "--http"), "--http", c.text,
                           {c.reason, "expected HOST:PORT", "127.0.0.1:9400"}))
        << c.text;
  }
}

}  // namespace
}  // namespace tessera
