#pragma once
// The ckpt::Error that `body` throws, for tests that look at its code,
// message and context; a body that throws none fails the test.

#include <gtest/gtest.h>

#include "ckpt/error.h"

namespace ckpt::testing {

template <class Body>
Error error_of(Body&& body) {
  try {
    body();
  } catch (const Error& error) {
    return error;
  }
  ADD_FAILURE() << "no ckpt::Error thrown";
  return Error(ErrorCode::kIo, "none");
}

}  // namespace ckpt::testing
