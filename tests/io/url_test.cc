// The URL cache's pieces that need no server: URLs taken apart, the ranges
// an entry holds, SHA-256, Content-Range, the cache's records and offline
// mode. The transfers themselves run against a real nginx and a fault
// server in tests/interop/test_url.py.

#include "ckpt/url.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "ckpt/error.h"
#include "io/http.h"
#include "io/sha256.h"
#include "io/url_cache.h"
#include "support/error_of.h"
#include "support/files.h"
#include "support/temp_dir.h"

namespace ckpt::detail {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::write_file;

// Sets an environment variable for one test, restoring it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(Url, SchemesThatAreUrls) {
  EXPECT_TRUE(is_url("http://h/x"));
  EXPECT_TRUE(is_url("HTTPS://h/x"));
  EXPECT_FALSE(is_url("file:///x"));
  EXPECT_FALSE(is_url("http:/x"));
  EXPECT_FALSE(is_url("model.safetensors"));
  EXPECT_FALSE(is_url("/data/http://x"));
}

TEST(Url, FileNameAndFragment) {
  const std::string digest(64, 'A');
  const ParsedUrl parsed = parse_url("http://h:8/dir/m%20x.safetensors?token=1#sha256=" + digest);
  EXPECT_EQ(parsed.url, "http://h:8/dir/m%20x.safetensors?token=1");
  EXPECT_EQ(parsed.fragment_sha256, std::string(64, 'a'));
  EXPECT_EQ(parsed.file_name, "m_20x.safetensors");
  EXPECT_EQ(parse_url("http://h/").file_name, "download");
  EXPECT_EQ(parse_url("http://h").file_name, "download");
  EXPECT_EQ(parse_url("http://h/..").file_name, "download");
  EXPECT_TRUE(parse_url("http://h/a.pt#other").fragment_sha256.empty());
}

TEST(Url, MalformedFragmentHashIsRefused) {
  const Error error = error_of([] { parse_url("http://h/a.pt#sha256=abc"); });
  EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(error.what()).find("http://h/a.pt"), std::string::npos) << error.what();
}

// torch.hub's HASH_REGEX r'-([a-f0-9]*)\.': its first match.
TEST(Url, HashPrefixAsTorchHubFindsIt) {
  EXPECT_EQ(parse_url("https://download.pytorch.org/models/resnet18-f37072fd.pth").hash_prefix, "f37072fd");
  EXPECT_EQ(parse_url("http://h/a-b-0123.pt").hash_prefix, "0123");
  EXPECT_EQ(parse_url("http://h/model.pt").hash_prefix, "");
  EXPECT_EQ(parse_url("http://h/model-XYZ.pt").hash_prefix, "");
}

TEST(RangeSet, AddsMergesAndFindsGaps) {
  RangeSet set;
  set.add({10, 20});
  set.add({30, 40});
  set.add({20, 25});  // touches the first
  set.add({5, 5});    // empty: nothing
  ASSERT_EQ(set.ranges().size(), 2u);
  EXPECT_EQ(set.ranges()[0], (ByteRange{10, 25}));
  EXPECT_EQ(set.covered(), 25u);
  EXPECT_EQ(set.missing({0, 50}), (std::vector<ByteRange>{{0, 10}, {25, 30}, {40, 50}}));
  EXPECT_TRUE(set.covers({12, 24}));
  EXPECT_FALSE(set.covers({24, 31}));
  set.add({0, 100});  // swallows both
  ASSERT_EQ(set.ranges().size(), 1u);
  EXPECT_EQ(set.ranges()[0], (ByteRange{0, 100}));
}

TEST(RangeSet, CoalescesNeighboursWithinTheGap) {
  EXPECT_EQ(coalesce({{100, 200}, {0, 50}, {60, 70}, {500, 600}}, 20),
            (std::vector<ByteRange>{{0, 70}, {100, 200}, {500, 600}}));
  EXPECT_EQ(coalesce({{0, 10}, {5, 8}, {10, 10}}, 0), (std::vector<ByteRange>{{0, 10}}));
}

// FIPS 180-2's examples.
TEST(Sha256, KnownDigests) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Sha256 pieces;
  pieces.update("abcdbcdecdefdefgefghfghighijhijk");
  pieces.update("ijkljklmklmnlmnomnopnopq");
  EXPECT_EQ(pieces.hex(), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_TRUE(is_sha256_hex(std::string(64, 'F')));
  EXPECT_FALSE(is_sha256_hex(std::string(63, 'f')));
  EXPECT_FALSE(is_sha256_hex(std::string(63, 'f') + "g"));
}

// A file's hash read back with positioned reads (what a deferred hash does
// after a download): the same as hashing the bytes in memory.
TEST(Sha256, OfAFileReadBack) {
  testing::TempDir dir;
  std::string bytes(9 << 20, '\0');  // more than one read's buffer
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 + i / 4096);
  const std::filesystem::path path = dir / "f.bin";
  testing::write_file(path, bytes);
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(sha256_of_file(fd, bytes.size(), path), sha256_hex(bytes));
  EXPECT_EQ(sha256_of_file(fd, 1000, path), sha256_hex(std::string_view(bytes).substr(0, 1000)));
  const Error shorter = error_of([&] { sha256_of_file(fd, bytes.size() + 1, path); });
  EXPECT_EQ(shorter.code(), ErrorCode::kIo);
  EXPECT_EQ(shorter.context().path, path);
  ::close(fd);
}

TEST(Http, ContentRange) {
  HttpResponse response;
  ASSERT_TRUE(parse_content_range("bytes 100-199/1000", response));
  EXPECT_EQ(*response.range_first, 100u);
  EXPECT_EQ(*response.range_last, 199u);
  EXPECT_EQ(*response.total, 1000u);
  ASSERT_TRUE(parse_content_range("bytes 0-0/*", response));
  EXPECT_FALSE(response.total.has_value());
  for (const char* bad : {"bytes 5-4/10", "bytes 0-10/10", "items 0-1/2", "bytes 0-/2", "bytes -1/2", "bytes 0-1"}) {
    HttpResponse fresh;
    EXPECT_FALSE(parse_content_range(bad, fresh)) << bad;
  }
}

class CacheTest : public ::testing::Test {
 protected:
  testing::TempDir dir_;
  ScopedEnv cache_{"CKPT_CACHE", (dir_ / "cache").string()};
};

TEST_F(CacheTest, DirectoryFromTheEnvironment) {
  EXPECT_EQ(cache_directory(), dir_ / "cache");
  ScopedEnv none("CKPT_CACHE", "");
  ScopedEnv xdg("XDG_CACHE_HOME", (dir_ / "xdg").string());
  EXPECT_EQ(cache_directory(), dir_ / "xdg" / "ckpt");
  ScopedEnv no_xdg("XDG_CACHE_HOME", "");
  ScopedEnv home("HOME", (dir_ / "home").string());
  EXPECT_EQ(cache_directory(), dir_ / "home" / ".cache" / "ckpt");
}

// Offline, an absent entry fails at once, naming the URL, and leaves no
// entry directory behind; nothing is requested (the host would not resolve).
TEST_F(CacheTest, OfflineMissNamesTheUrl) {
  for (bool from_env : {false, true}) {
    ScopedEnv offline("CKPT_OFFLINE", from_env ? "1" : "0");
    FetchOptions options;
    if (!from_env) options.offline = true;
    const Error error = error_of([&] { fetch("http://nonexistent.invalid/m.safetensors", options); });
    EXPECT_EQ(error.code(), ErrorCode::kRemote);
    EXPECT_NE(std::string(error.what()).find("http://nonexistent.invalid/m.safetensors"), std::string::npos);
    EXPECT_NE(std::string(error.what()).find("offline"), std::string::npos) << error.what();
    EXPECT_TRUE(cache_entries().empty());
  }
}

TEST_F(CacheTest, ArgumentHashMustBeHexAndAgreeWithTheFragment) {
  FetchOptions options{.sha256 = "xyz", .offline = true};
  EXPECT_EQ(error_of([&] { fetch("http://h/a.pt", options); }).code(), ErrorCode::kInvalidArgument);
  options.sha256 = std::string(64, 'a');
  const Error error = error_of([&] { fetch("http://h/a.pt#sha256=" + std::string(64, 'b'), options); });
  EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(error.what()).find("disagrees"), std::string::npos) << error.what();
}

// A refused connection on loopback: one clean error, no entry left.
TEST_F(CacheTest, RefusedConnectionIsOneRemoteError) {
  ScopedEnv retries("CKPT_FETCH_RETRIES", "0");
  const Error error = error_of([] { fetch("http://127.0.0.1:1/m.safetensors"); });
  EXPECT_EQ(error.code(), ErrorCode::kRemote);
  EXPECT_NE(std::string(error.what()).find("cannot connect"), std::string::npos) << error.what();
  EXPECT_EQ(std::string(error.what()).find('\n'), std::string::npos);
  EXPECT_TRUE(cache_entries().empty());
  std::error_code ignored;
  size_t left = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir_ / "cache", ignored)) ++left;
  EXPECT_EQ(left, 0u);
}

// Records that are damaged one defect at a time are left out of the
// listing (never a crash); a good one written beside them is listed, and
// rm / clear remove entries by URL.
TEST_F(CacheTest, DamagedRecordsAreLeftOutOfTheListing) {
  const fs::path root = dir_ / "cache";
  const auto entry = [&](const std::string& name, const std::string& record) {
    fs::create_directories(root / name);
    write_file(root / name / "entry.json", record);
  };
  const std::string good_file = "m.safetensors";
  entry("good", R"({"url":"http://h/m.safetensors","file":"m.safetensors","size":3,"sha256":")" +
                    std::string(64, 'a') + R"(","etag":"","last_modified":"","time":1,"complete":true,"ranges":[]})");
  write_file(root / "good" / good_file, "abc");
  entry("notjson", "{");
  entry("nourl", R"({"file":"m","size":1})");
  entry("slash", R"({"url":"http://h/x","file":"../x","size":1})");
  entry("range_past_end", R"({"url":"http://h/x","file":"x","size":1,"ranges":[[0,5]]})");
  entry("range_reversed", R"({"url":"http://h/x","file":"x","size":9,"ranges":[[5,1]]})");
  entry("complete_without_hash", R"({"url":"http://h/x","file":"x","size":1,"complete":true})");
  const std::vector<CacheEntry> entries = cache_entries();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].url, "http://h/m.safetensors");
  EXPECT_TRUE(entries[0].complete);
  EXPECT_EQ(entries[0].path, root / "good" / good_file);
  // A complete entry is found offline, and by the fragment's hash.
  EXPECT_EQ(fetch("http://h/m.safetensors", {.offline = true}), root / "good" / good_file);
  EXPECT_EQ(fetch("http://h/m.safetensors#sha256=" + std::string(64, 'a'), {.offline = true}),
            root / "good" / good_file);
  EXPECT_EQ(error_of([&] { fetch("http://h/m.safetensors#sha256=" + std::string(64, 'b'), {.offline = true}); }).code(),
            ErrorCode::kRemote);
  // A complete entry whose file is shorter than its record is not used.
  write_file(root / "good" / good_file, "ab");
  EXPECT_FALSE(cache_entries()[0].complete);
  write_file(root / "good" / good_file, "abc");
  EXPECT_EQ(cache_remove("http://h/other"), 0u);
  EXPECT_EQ(cache_remove("http://h/m.safetensors#sha256=ignored"), 1u);
  EXPECT_FALSE(fs::exists(root / "good"));
  EXPECT_EQ(cache_clear(), 6u);  // the damaged ones too
  EXPECT_TRUE(fs::is_empty(root));
}

// torch.hub's check_hash on a cached entry: the name's prefix must start the hash.
TEST_F(CacheTest, HashPrefixIsCheckedWhenAsked) {
  const fs::path root = dir_ / "cache";
  fs::create_directories(root / "e");
  write_file(root / "e" / "resnet-abcd1234.pt", "abc");
  write_file(root / "e" / "entry.json", R"({"url":"http://h/resnet-abcd1234.pt","file":"resnet-abcd1234.pt","size":3,)"
                                        R"("sha256":")" + std::string(64, 'a') + R"(","complete":true})");
  EXPECT_NO_THROW(fetch("http://h/resnet-abcd1234.pt", {.offline = true}));
  const Error error = error_of([] { fetch("http://h/resnet-abcd1234.pt", {.check_hash_prefix = true, .offline = true}); });
  EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
  EXPECT_NE(std::string(error.what()).find("abcd1234"), std::string::npos) << error.what();
}

}  // namespace
}  // namespace ckpt::detail
