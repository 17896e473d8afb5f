// The input is a RETURNN learning_rates file: parsed by
// parse_learning_rates (src/manager/learning_rates.h); what parses is
// written back with learning_rates_text and must read back to the same
// text (a difference is a finding: abort).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ckpt/error.h"
#include "fuzz_support.h"
#include "manager/learning_rates.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ckpt::fuzz::run_one(size, [&] {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    ckpt::detail::LearningRates rates;
    try {
      rates = ckpt::detail::parse_learning_rates(text, "input/learning_rates");
    } catch (const ckpt::Error&) {
      return;
    }
    std::string written;
    try {
      written = ckpt::detail::learning_rates_text(rates);
    } catch (const ckpt::Error&) {
      return;  // a record the writer refuses (no learning rate)
    }
    const std::string again = ckpt::detail::learning_rates_text(ckpt::detail::parse_learning_rates(written));
    if (again != written) {
      std::fprintf(stderr, "learning_rates round trip differs:\n%s\n---\n%s\n", written.c_str(), again.c_str());
      std::abort();
    }
  });
}
