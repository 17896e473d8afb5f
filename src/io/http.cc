#include "io/http.h"

#include <curl/curl.h>

#include <charconv>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <string_view>

namespace ckpt::detail {
namespace {

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r' || text.back() == '\n')) {
    text.remove_suffix(1);
  }
  return text;
}

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

std::optional<uint64_t> parse_number(std::string_view text) {
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

HttpFailure classify(CURLcode code) {
  switch (code) {
    case CURLE_OK: return HttpFailure::kNone;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY: return HttpFailure::kResolve;
    case CURLE_COULDNT_CONNECT: return HttpFailure::kConnect;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_USE_SSL_FAILED:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_ENGINE_INITFAILED:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_SHUTDOWN_FAILED: return HttpFailure::kTls;
    case CURLE_OPERATION_TIMEDOUT: return HttpFailure::kTimeout;
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM: return HttpFailure::kCut;
    case CURLE_WRITE_ERROR:
    case CURLE_ABORTED_BY_CALLBACK: return HttpFailure::kAborted;
    default: return HttpFailure::kOther;
  }
}

}  // namespace

struct HttpClient::State {
  CURL* curl = nullptr;
  // Per request:
  const HttpRequest* request = nullptr;
  HttpResponse response;
  bool headers_done = false;  // on_headers called (or the status is not 2xx)
  bool accepted = false;      // the body goes to on_body
  std::exception_ptr error;   // thrown by a callback, rethrown after the transfer
  char message[CURL_ERROR_SIZE] = {};

  bool is_success() const { return response.status >= 200 && response.status < 300; }

  // Runs on_headers once, at the first body byte or the end.
  bool start_body() {
    if (headers_done) return accepted;
    headers_done = true;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
    if (!is_success()) return accepted = false;
    curl_off_t length = -1;
    if (curl_easy_getinfo(curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length) == CURLE_OK && length >= 0) {
      response.content_length = static_cast<uint64_t>(length);
    }
    accepted = true;
    if (request->on_headers) {
      try {
        if (!request->on_headers(response)) return accepted = false, abort();
      } catch (...) {
        error = std::current_exception();
        return accepted = false, abort();
      }
    }
    return true;
  }
  bool aborted_by_caller = false;
  bool abort() {
    aborted_by_caller = true;
    return false;
  }

  static size_t on_header(char* data, size_t size, size_t count, void* self_pointer) {
    auto* self = static_cast<State*>(self_pointer);
    const std::string_view line(data, size * count);
    if (line.rfind("HTTP/", 0) == 0) {
      // A new response (after a redirect or a 100 Continue): forget the last one's headers.
      self->response.etag.clear();
      self->response.last_modified.clear();
      self->response.range_first.reset();
      self->response.range_last.reset();
      self->response.total.reset();
      return line.size();
    }
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) return line.size();
    const std::string_view name = trim(line.substr(0, colon));
    const std::string_view value = trim(line.substr(colon + 1));
    if (equals_ignoring_case(name, "etag")) {
      self->response.etag = std::string(value);
    } else if (equals_ignoring_case(name, "last-modified")) {
      self->response.last_modified = std::string(value);
    } else if (equals_ignoring_case(name, "content-range")) {
      parse_content_range(value, self->response);
    }
    return line.size();
  }

  static size_t on_write(char* data, size_t size, size_t count, void* self_pointer) {
    auto* self = static_cast<State*>(self_pointer);
    const size_t bytes = size * count;
    if (!self->start_body()) return self->aborted_by_caller ? 0 : bytes;  // another status: discard
    if (self->request->on_body) {
      try {
        if (!self->request->on_body(std::as_bytes(std::span(data, bytes)))) {
          self->abort();
          return 0;
        }
      } catch (...) {
        self->error = std::current_exception();
        self->abort();
        return 0;
      }
    }
    self->response.body_bytes += bytes;
    return bytes;
  }

  static int on_progress(void* self_pointer, curl_off_t expected, curl_off_t received, curl_off_t, curl_off_t) {
    auto* self = static_cast<State*>(self_pointer);
    if (self->request->on_progress && self->accepted) {
      try {
        self->request->on_progress(static_cast<uint64_t>(received), static_cast<uint64_t>(expected));
      } catch (...) {
      }
    }
    return 0;
  }
};

HttpClient::HttpClient() : state_(std::make_unique<State>()) {
  global_init();
  state_->curl = curl_easy_init();
  if (state_->curl == nullptr) throw std::bad_alloc();
}

HttpClient::~HttpClient() { curl_easy_cleanup(state_->curl); }

HttpResponse HttpClient::get(const HttpRequest& request) {
  State& state = *state_;
  CURL* curl = state.curl;
  curl_easy_reset(curl);
  state.request = &request;
  state.response = HttpResponse();
  state.headers_done = false;
  state.accepted = false;
  state.aborted_by_caller = false;
  state.error = nullptr;
  state.message[0] = '\0';

  curl_easy_setopt(curl, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "ckpt");
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, state.message);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, request.stall_seconds);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, request.stall_seconds);
  // Receives of up to 2 MiB (libcurl allows up to CURL_MAX_READ_SIZE, 10
  // MiB): fewer reads and callbacks per byte than 512 KiB, measurably less
  // CPU per byte on loopback (docs/urls.md, Figures).
  curl_easy_setopt(curl, CURLOPT_BUFFERSIZE, 2L * 1024 * 1024);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &State::on_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &state);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &State::on_write);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &state);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, &State::on_progress);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &state);
  // libcurl calls the progress function on every pass of its transfer loop:
  // only when someone listens.
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, request.on_progress ? 0L : 1L);
  std::string range;
  curl_slist* headers = nullptr;
  if (request.range_first) {
    range = std::to_string(*request.range_first) + "-";
    if (request.range_last) range += std::to_string(*request.range_last);
    curl_easy_setopt(curl, CURLOPT_RANGE, range.c_str());
    if (!request.if_range.empty()) {
      headers = curl_slist_append(headers, ("If-Range: " + request.if_range).c_str());
      curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    }
  }
  const CURLcode code = curl_easy_perform(curl);
  curl_slist_free_all(headers);
  state.request = nullptr;
  if (state.error) std::rethrow_exception(state.error);
  HttpResponse response = std::move(state.response);
  if (response.status == 0) curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  if (code == CURLE_OK && !state.headers_done && response.status >= 200 && response.status < 300) {
    // An empty body: on_headers still sees the answer.
    state.request = &request;
    state.response = response;
    const bool accepted = state.start_body();
    state.request = nullptr;
    if (state.error) std::rethrow_exception(state.error);
    response = std::move(state.response);
    if (!accepted) response.failure = HttpFailure::kAborted;
    return response;
  }
  response.failure = state.aborted_by_caller ? HttpFailure::kAborted : classify(code);
  if (response.failure != HttpFailure::kNone) {
    response.failure_text = state.message[0] != '\0' ? state.message : curl_easy_strerror(code);
  }
  return response;
}

bool parse_content_range(std::string_view value, HttpResponse& response) {
  value = trim(value);
  if (value.rfind("bytes ", 0) != 0) return false;
  value.remove_prefix(6);
  const size_t dash = value.find('-');
  const size_t slash = value.find('/');
  if (dash == std::string_view::npos || slash == std::string_view::npos || dash > slash) return false;
  const auto first = parse_number(trim(value.substr(0, dash)));
  const auto last = parse_number(trim(value.substr(dash + 1, slash - dash - 1)));
  const std::string_view total_text = trim(value.substr(slash + 1));
  const auto total = total_text == "*" ? std::nullopt : parse_number(total_text);
  if (!first || !last || *last < *first || (total_text != "*" && (!total || *last >= *total))) return false;
  response.range_first = first;
  response.range_last = last;
  response.total = total;
  return true;
}

std::string_view http_reason(long status) {
  switch (status) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 410: return "Gone";
    case 416: return "Range Not Satisfiable";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "";
  }
}

}  // namespace ckpt::detail
