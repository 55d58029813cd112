// Tests for ParseRequest (every accepted form and every error path), SerializeResponse and
// PercentDecode. Pure functions: no sockets here (server_test.cc has those).
#include "http/message.h"

#include <gtest/gtest.h>

#include <string>

namespace tessera::http {
namespace {

using Kind = ParseResult::Kind;

ParseResult Parse(std::string_view text, const ParseLimits& limits = {}) {
  return ParseRequest(text, limits);
}

TEST(ParseRequest, ReadsASimpleGet) {
  const std::string text = "GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n";
  ParseResult r = Parse(text);
  ASSERT_EQ(r.kind, Kind::kComplete) << r.error;
  EXPECT_EQ(r.consumed, text.size());
  EXPECT_EQ(r.request.method, "GET");
  EXPECT_EQ(r.request.path, "/metrics");
  EXPECT_EQ(r.request.target, "/metrics");
  EXPECT_EQ(r.request.version, "HTTP/1.1");
  EXPECT_TRUE(r.request.keep_alive);
  EXPECT_TRUE(r.request.body.empty());
  EXPECT_EQ(r.request.headers.size(), 2u);
}

TEST(ParseRequest, HeaderNamesIgnoreCaseAndValuesAreTrimmed) {
  ParseResult r = Parse("GET / HTTP/1.1\r\nhOsT: a\r\nX-Thing:   padded value \t\r\n\r\n");
  ASSERT_EQ(r.kind, Kind::kComplete) << r.error;
  EXPECT_EQ(r.request.headers.Get("HOST"), "a");
  EXPECT_EQ(r.request.headers.Get("x-thing"), "padded value");
  EXPECT_FALSE(r.request.headers.Get("missing").has_value());
  EXPECT_FALSE(r.request.headers.Has("Content-Length"));
}

TEST(ParseRequest, DecodesThePathAndSplitsTheQuery) {
  ParseResult r =
      Parse("GET /v1/ctl/0/my%20box?x=1&name=a%2Fb+c&flag&&x=2 HTTP/1.1\r\nHost: h\r\n\r\n");
  ASSERT_EQ(r.kind, Kind::kComplete) << r.error;
  EXPECT_EQ(r.request.path, "/v1/ctl/0/my box");
  EXPECT_EQ(r.request.target, "/v1/ctl/0/my%20box?x=1&name=a%2Fb+c&flag&&x=2");
  ASSERT_EQ(r.request.query.size(), 3u);
  EXPECT_EQ(r.request.query.at("x"), "2");  // the last repeat wins
  EXPECT_EQ(r.request.query.at("name"), "a/b c");
  EXPECT_EQ(r.request.query.at("flag"), "");
}

TEST(ParseRequest, ReadsABodyByContentLength) {
  const std::string text =
      "PUT /v1/ctl/0/policy HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n3\nGET";
  ParseResult r = Parse(text);
  ASSERT_EQ(r.kind, Kind::kComplete) << r.error;
  EXPECT_EQ(r.request.body, "3\n");
  EXPECT_EQ(r.consumed, text.size() - 3);  // the next (pipelined) request is left alone
}

TEST(ParseRequest, NeedsMoreUntilHeadAndBodyAreComplete) {
  const std::string text = "POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello";
  for (size_t n = 0; n < text.size(); ++n) {
    ParseResult r = Parse(text.substr(0, n));
    EXPECT_EQ(r.kind, Kind::kNeedMore) << "prefix of " << n << " bytes: " << r.error;
  }
  EXPECT_EQ(Parse(text).kind, Kind::kComplete);
}

TEST(ParseRequest, SkipsEmptyLinesBeforeTheRequestLine) {
  const std::string text = "\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n";
  ParseResult r = Parse(text);
  ASSERT_EQ(r.kind, Kind::kComplete) << r.error;
  EXPECT_EQ(r.consumed, text.size());
}

TEST(ParseRequest, KeepAliveFollowsVersionAndConnectionHeader) {
  EXPECT_FALSE(Parse("GET / HTTP/1.1\r\nHost: h\r\nConnection: Close\r\n\r\n").request.keep_alive);
  EXPECT_FALSE(Parse("GET / HTTP/1.0\r\n\r\n").request.keep_alive);
  ParseResult r = Parse("GET / HTTP/1.0\r\nConnection: foo, Keep-Alive\r\n\r\n");
  ASSERT_EQ(r.kind, Kind::kComplete) << r.error;  // HTTP/1.0 needs no Host
  EXPECT_TRUE(r.request.keep_alive);
}

struct BadRequest {
  const char* name;
  std::string text;
  int status;
  const char* fragment;
};

class ParseRequestRejects : public ::testing::TestWithParam<BadRequest> {};

TEST_P(ParseRequestRejects, WithStatusAndMessage) {
  const BadRequest& c = GetParam();
  ParseResult r = Parse(c.text);
  ASSERT_EQ(r.kind, Kind::kError) << c.name;
  EXPECT_EQ(r.status, c.status) << c.name << ": " << r.error;
  EXPECT_NE(r.error.find(c.fragment), std::string::npos) << c.name << ": " << r.error;
  EXPECT_EQ(r.error.find('\n'), std::string::npos) << "one line: " << r.error;
}

const std::string kBigHeader = "GET / HTTP/1.1\r\nHost: h\r\nX: " + std::string(9000, 'a');

INSTANTIATE_TEST_SUITE_P(
    EveryErrorPath, ParseRequestRejects,
    ::testing::Values(
        BadRequest{"two_parts", "GET /\r\n\r\n", 400, "is not METHOD SP TARGET SP HTTP-VERSION"},
        BadRequest{"four_parts", "GET / x HTTP/1.1\r\nHost: h\r\n\r\n", 400, "METHOD SP TARGET"},
        BadRequest{"bad_method", "G(T / HTTP/1.1\r\nHost: h\r\n\r\n", 400, "method \"G(T\""},
        BadRequest{"bad_version", "GET / HTTX/1.1\r\nHost: h\r\n\r\n", 400, "is not HTTP/x.y"},
        BadRequest{"http2", "GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505, "use HTTP/1.1"},
        BadRequest{"absolute_form", "GET http://h/ HTTP/1.1\r\nHost: h\r\n\r\n", 400,
                   "origin-form"},
        BadRequest{"control_in_target", "GET /a\x01 HTTP/1.1\r\nHost: h\r\n\r\n", 400,
                   "control or non-ASCII"},
        BadRequest{"fragment", "GET /a#b HTTP/1.1\r\nHost: h\r\n\r\n", 400, "fragment"},
        BadRequest{"bad_percent", "GET /a%2 HTTP/1.1\r\nHost: h\r\n\r\n", 400, "two hex digits"},
        BadRequest{"bad_percent_hex", "GET /a%zz HTTP/1.1\r\nHost: h\r\n\r\n", 400,
                   "two hex digits"},
        BadRequest{"encoded_nul", "GET /a%00 HTTP/1.1\r\nHost: h\r\n\r\n", 400, "NUL"},
        BadRequest{"bad_query", "GET /a?x=%g0 HTTP/1.1\r\nHost: h\r\n\r\n", 400,
                   "query parameter \"x=%g0\""},
        BadRequest{"bare_lf", "GET / HTTP/1.1\nHost: h\n\n", 400, "bare LF"},
        BadRequest{"bare_cr", "GET / HTTP/1.1\rHost: h\r\n\r\n", 400, "bare CR"},
        BadRequest{"leading_bare_cr", "\rGET / HTTP/1.1\r\n\r\n", 400, "bare CR"},
        BadRequest{"folding", "GET / HTTP/1.1\r\nHost: h\r\n  more\r\n\r\n", 400, "folding"},
        BadRequest{"no_colon", "GET / HTTP/1.1\r\nHost: h\r\nNoColon\r\n\r\n", 400, "has no ':'"},
        BadRequest{"space_before_colon", "GET / HTTP/1.1\r\nHost : h\r\n\r\n", 400,
                   "not a token"},
        BadRequest{"control_in_value", "GET / HTTP/1.1\r\nHost: h\x01\r\n\r\n", 400,
                   "control character"},
        BadRequest{"no_host", "GET / HTTP/1.1\r\n\r\n", 400, "without a Host"},
        BadRequest{"two_hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400,
                   "more than one Host"},
        BadRequest{"chunked",
                   "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 411,
                   "chunked request bodies are not supported"},
        BadRequest{"other_coding", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n",
                   501, "Transfer-Encoding \"gzip\""},
        BadRequest{"bad_length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1x\r\n\r\n", 400,
                   "Content-Length \"1x\""},
        BadRequest{"negative_length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n",
                   400, "not a number"},
        BadRequest{"huge_length",
                   "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999999\r\n\r\n",
                   400, "not a number"},
        BadRequest{"disagreeing_lengths",
                   "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                   400, "disagree"},
        BadRequest{"body_too_large",
                   "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1048577\r\n\r\n", 413,
                   "1048577 bytes is larger than the limit of 1048576"},
        BadRequest{"head_too_large_unfinished", kBigHeader, 431, "larger than 8192"},
        BadRequest{"head_too_large_finished", kBigHeader + "\r\n\r\n", 431, "larger than 8192"}),
    [](const ::testing::TestParamInfo<BadRequest>& info) { return std::string(info.param.name); });

TEST(ParseRequest, RefusesTooManyHeaderFields) {
  ParseLimits limits;
  limits.max_header_count = 3;
  ParseResult r = Parse("GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", limits);
  ASSERT_EQ(r.kind, Kind::kError);
  EXPECT_EQ(r.status, 431);
  EXPECT_NE(r.error.find("more than 3 header fields"), std::string::npos) << r.error;
}

TEST(ParseRequest, AcceptsAHeadOfExactlyTheLimit) {
  const std::string start = "GET / HTTP/1.1\r\nHost: h\r\nX: ";
  const std::string end = "\r\n\r\n";
  ParseLimits limits;
  limits.max_head_bytes = 100;
  const std::string exact = start + std::string(100 - start.size() - end.size(), 'a') + end;
  ASSERT_EQ(exact.size(), 100u);
  EXPECT_EQ(Parse(exact, limits).kind, Kind::kComplete);
  const std::string over = start + std::string(101 - start.size() - end.size(), 'a') + end;
  EXPECT_EQ(Parse(over, limits).kind, Kind::kError);
}

TEST(ParseRequest, BodyAtTheLimitIsAccepted) {
  ParseLimits limits;
  limits.max_body_bytes = 4;
  ParseResult r = Parse("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\nabcd", limits);
  ASSERT_EQ(r.kind, Kind::kComplete) << r.error;
  EXPECT_EQ(r.request.body, "abcd");
}

TEST(PercentDecode, DecodesAndRefusesBadEscapes) {
  EXPECT_EQ(PercentDecode("a%41%62+c", false), "aAb+c");
  EXPECT_EQ(PercentDecode("a%41%62+c", true), "aAb c");
  EXPECT_FALSE(PercentDecode("%", false).has_value());
  EXPECT_FALSE(PercentDecode("%4", false).has_value());
  EXPECT_FALSE(PercentDecode("%4x", false).has_value());
}

TEST(SerializeResponse, WritesStatusLengthAndConnection) {
  Response response = Response::Text(404, "no such path");
  response.headers.emplace_back("X-Tessera", "1");
  std::string out, error;
  ASSERT_TRUE(SerializeResponse(response, true, false, &out, &error)) << error;
  EXPECT_EQ(out,
            "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: 13\r\nConnection: keep-alive\r\nX-Tessera: 1\r\n\r\nno such path\n");
  ASSERT_TRUE(SerializeResponse(response, false, true, &out, &error)) << error;
  EXPECT_NE(out.find("Connection: close\r\n"), std::string::npos);
  EXPECT_NE(out.find("Content-Length: 13\r\n"), std::string::npos);
  EXPECT_EQ(out.substr(out.size() - 4), "\r\n\r\n");  // HEAD: no body
}

TEST(SerializeResponse, RefusesHeadersAHandlerMayNotSet) {
  std::string out = "untouched", error;
  Response injected;
  injected.headers.emplace_back("X-A", "1\r\nSet-Cookie: x");
  EXPECT_FALSE(SerializeResponse(injected, true, false, &out, &error));
  EXPECT_NE(error.find("CR, LF or NUL"), std::string::npos) << error;
  Response owned;
  owned.headers.emplace_back("content-length", "5");
  EXPECT_FALSE(SerializeResponse(owned, true, false, &out, &error));
  EXPECT_NE(error.find("set by the server"), std::string::npos) << error;
  Response bad_status;
  bad_status.status = 42;
  EXPECT_FALSE(SerializeResponse(bad_status, true, false, &out, &error));
  EXPECT_NE(error.find("status 42"), std::string::npos) << error;
  EXPECT_EQ(out, "untouched");
}

}  // namespace
}  // namespace tessera::http
