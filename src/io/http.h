#pragma once
// One HTTP(S) GET over libcurl, streamed: the transport under the URL cache
// (url_cache.h), which owns retries, resumption and verification. Knows no
// format. Only http and https are spoken, redirects included.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

namespace ckpt::detail {

// How a transfer ended, coarse enough to decide on a retry.
enum class HttpFailure {
  kNone,     // the server answered and the body (if any) arrived whole
  kResolve,  // the host name does not resolve
  kConnect,  // no connection (refused, unreachable)
  kTls,      // the TLS handshake or the certificate failed
  kTimeout,  // no byte moved for the stall time (or the connect timed out)
  kCut,      // the connection broke before the body was whole (reset, closed early, nothing received)
  kAborted,  // the caller's on_body or on_headers returned false
  kOther,    // anything else libcurl reports
};

struct HttpResponse {
  long status = 0;  // 0 when no answer arrived
  std::string etag;
  std::string last_modified;
  std::optional<uint64_t> content_length;
  // Content-Range "bytes FIRST-LAST/TOTAL" of a 206 (TOTAL may be "*": nullopt).
  std::optional<uint64_t> range_first;
  std::optional<uint64_t> range_last;
  std::optional<uint64_t> total;
  uint64_t body_bytes = 0;  // body bytes handed to on_body
  HttpFailure failure = HttpFailure::kNone;
  std::string failure_text;  // libcurl's message for a failure
};

struct HttpRequest {
  std::string url;
  // A range request "bytes=FIRST-" or "bytes=FIRST-LAST" (LAST inclusive).
  std::optional<uint64_t> range_first;
  std::optional<uint64_t> range_last;
  // Sent as If-Range with a range request (an ETag or an HTTP date): the
  // server answers 200 with the whole file when it has changed.
  std::string if_range;
  // No byte moved for this long (connecting included) ends the transfer with kTimeout.
  long stall_seconds = 30;
  // Called once, when the status and headers of the final response are in
  // and before its first body byte (or at its end, for an empty body), for a
  // 2xx status only; false aborts (kAborted).
  std::function<bool(const HttpResponse&)> on_headers;
  // Each piece of a 2xx body, in order; false aborts (kAborted). Bodies of
  // other statuses are discarded.
  std::function<bool(std::span<const std::byte>)> on_body;
  // Called about ten times a second: body bytes received so far and the
  // body's length when known (0 when not).
  std::function<void(uint64_t received, uint64_t expected)> on_progress;
};

// A reusable connection (libcurl easy handle: keep-alive between requests
// to one server). Not thread-safe: one request at a time.
class HttpClient {
 public:
  HttpClient();
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Performs `request`. Never throws for what the network or the server does
  // (that is in the response); throws what on_headers / on_body throw.
  HttpResponse get(const HttpRequest& request);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// "bytes FIRST-LAST/TOTAL" parsed into `response`; false if malformed.
bool parse_content_range(std::string_view value, HttpResponse& response);

// The reason phrase of common HTTP statuses ("Not Found"); "" for others.
std::string_view http_reason(long status);

}  // namespace ckpt::detail
