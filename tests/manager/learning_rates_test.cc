// RETURNN's learning_rates file (src/manager/learning_rates.h): the shapes
// RETURNN writes and has written (better_repr's one-line and multi-line
// dicts, the old plain-float error, nan and inf, numpy scalars, :meta:
// entries), the text ckpt writes, and malformed files one defect at a time,
// each a kCorrupt naming the file, the line and the column.

#include "manager/learning_rates.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "ckpt/error.h"
#include "support/files.h"
#include "support/temp_dir.h"

namespace ckpt::detail {
namespace {

// As RETURNN's test_LearningRateControl.py test_load has it (indented).
constexpr const char* kReturnnFile = R"({
      1: EpochData(learningRate=0.0008, error={
      'dev_error_ctc': 0.21992561489090365,
      'dev_score_output/output_prob': 0.7316125233255415,
      'train_score_ctc': 0.42154947919396146,
      }),
      2: EpochData(learningRate=0.0008, error={
      'dev_error_ctc': 0.22486433815293946,
      'dev_score_output/output_prob': 0.7378438060027533,
      }),
    }
)";

TEST(LearningRatesTest, ReadsWhatReturnnWrites) {
  const LearningRates rates = parse_learning_rates(kReturnnFile);
  ASSERT_EQ(rates.size(), 2u);
  EXPECT_EQ(rates.at(1).learning_rate, 0.0008);
  EXPECT_EQ(rates.at(1).scores.size(), 3u);
  EXPECT_EQ(rates.at(1).scores.at("dev_score_output/output_prob"), 0.7316125233255415);
  EXPECT_EQ(rates.at(2).scores.at("dev_error_ctc"), 0.22486433815293946);
  EXPECT_TRUE(rates.at(2).meta.empty());
}

TEST(LearningRatesTest, ReadsOldAndOddShapes) {
  const LearningRates rates = parse_learning_rates(
      "{1: EpochData(learningRate=1.0, error=1.5),  # the old plain-float score\n"
      " 2: EpochData(learningRate=np.float64(0.5), error=None),\n"
      " 3: EpochData(error={'dev_score': float('nan'), \"train_score\": -inf, 'x': nan}, learning_rate=1e-05),\n"
      " 4: EpochData(learningRate=0.1, error={'dev_score': 2, ':meta:effective_learning_rate': 0.05,\n"
      "    ':meta:note': 'a \\'b\\'', ':meta:list': [1, (2, 3), {'k': None}]}),\n"
      " 5: EpochData(learningRate=0.1, error={}, meta={'step': 100}),\n"
      " 1_0: EpochData(learningRate=+.5, error={'dev_score': np.float32(0.1)},),\n"
      "}\n");
  ASSERT_EQ(rates.size(), 6u);
  EXPECT_EQ(rates.at(1).scores.at("old_format_score"), 1.5);
  EXPECT_EQ(rates.at(2).learning_rate, 0.5);
  EXPECT_TRUE(rates.at(2).scores.empty());
  EXPECT_TRUE(std::isnan(rates.at(3).scores.at("dev_score")));
  EXPECT_EQ(rates.at(3).scores.at("train_score"), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(rates.at(3).scores.at("x")));
  EXPECT_EQ(rates.at(3).learning_rate, 1e-05);
  EXPECT_EQ(rates.at(4).scores.size(), 1u);
  EXPECT_EQ(rates.at(4).scores.at("dev_score"), 2.0);
  EXPECT_EQ(rates.at(4).meta.at("effective_learning_rate"), "0.05");
  EXPECT_EQ(rates.at(4).meta.at("note"), "'a \\'b\\''");
  EXPECT_EQ(rates.at(4).meta.at("list"), "[1, (2, 3), {'k': None}]");
  EXPECT_EQ(rates.at(5).meta.at("step"), "100");
  EXPECT_EQ(rates.at(10).learning_rate, 0.5);
  EXPECT_EQ(rates.at(10).scores.at("dev_score"), static_cast<double>(0.1f));
}

TEST(LearningRatesTest, ReadsStringEscapes) {
  const LearningRates rates = parse_learning_rates(
      "{1: EpochData(learningRate=1.0, error={'a\\tb': 1.0, 'caf\\xe9': 2.0, '\\u00e9\\U0001F600': 3.0, '\\101': 4.0,"
      " 'caf\xc3\xa9!': 5.0})}");
  const auto& scores = rates.at(1).scores;
  EXPECT_EQ(scores.at("a\tb"), 1.0);
  EXPECT_EQ(scores.at("caf\xc3\xa9"), 2.0);
  EXPECT_EQ(scores.at("\xc3\xa9\xf0\x9f\x98\x80"), 3.0);
  EXPECT_EQ(scores.at("A"), 4.0);
  EXPECT_EQ(scores.at("caf\xc3\xa9!"), 5.0);
}

TEST(LearningRatesTest, PythonFloatRepr) {
  EXPECT_EQ(python_float_repr(0.001), "0.001");
  EXPECT_EQ(python_float_repr(1.0), "1.0");
  EXPECT_EQ(python_float_repr(-2.5), "-2.5");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(python_float_repr(1e-05), "1e-05");
  EXPECT_EQ(python_float_repr(1.5e-07), "1.5e-07");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(python_float_repr(123456.789), "123456.789");
  EXPECT_EQ(python_float_repr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(python_float_repr(-0.0), "-0.0");
  EXPECT_EQ(python_float_repr(1.7976931348623157e308), "1.7976931348623157e+308");
  EXPECT_EQ(python_float_repr(5e-324), "5e-324");
}

TEST(LearningRatesTest, WritesAsBetterRepr) {
  LearningRates rates;
  rates[2] = {.learning_rate = 0.001, .scores = {{"dev_score", 1.25}, {"train_score", 2.0}}, .meta = {}};
  rates[1] = {.learning_rate = 0.001, .scores = {{"dev_score", 1.5}}, .meta = {}};
  rates[10] = {.learning_rate = 1e-05,
               .scores = {{"dev_score", std::numeric_limits<double>::quiet_NaN()}},
               .meta = {{"effective_learning_rate", "0.0005"}}};
  // better_repr: keys sorted (epochs as numbers), a dict of 40 characters
  // or more on lines of their own with trailing commas.
  EXPECT_EQ(learning_rates_text(rates),
            "{\n"
            "1: EpochData(learningRate=0.001, error={'dev_score': 1.5}),\n"
            "2: EpochData(learningRate=0.001, error={'dev_score': 1.25, 'train_score': 2.0}),\n"
            "10: EpochData(learningRate=1e-05, error={\n"
            "':meta:effective_learning_rate': 0.0005,\n"
            "'dev_score': float('nan'),\n"
            "}),\n"
            "}\n");
  const LearningRates back = parse_learning_rates(learning_rates_text(rates));
  EXPECT_EQ(back.at(2), rates.at(2));
  EXPECT_EQ(back.at(10).meta, rates.at(10).meta);
  EXPECT_TRUE(std::isnan(back.at(10).scores.at("dev_score")));
}

TEST(LearningRatesTest, WritesStringsAsPythonRepr) {
  LearningRates rates;
  rates[1] = {.learning_rate = 1.0, .scores = {{"it's", 1.0}, {"a\\b\n\x01", 2.0}, {"both'\"", 3.0}}, .meta = {}};
  const std::string text = learning_rates_text(rates);
  EXPECT_NE(text.find("\"it's\": 1.0"), std::string::npos) << text;
  EXPECT_NE(text.find("'a\\\\b\\n\\x01': 2.0"), std::string::npos) << text;
  EXPECT_NE(text.find("'both\\'\"': 3.0"), std::string::npos) << text;
  EXPECT_EQ(parse_learning_rates(text), rates);
}

TEST(LearningRatesTest, WriterRefusesWhatReturnnCannotRead) {
  LearningRates no_rate;
  no_rate[1] = {.learning_rate = std::nullopt, .scores = {}, .meta = {}};
  EXPECT_THROW(learning_rates_text(no_rate), Error);
  LearningRates meta_key;
  meta_key[1] = {.learning_rate = 1.0, .scores = {{":meta:x", 1.0}}, .meta = {}};
  EXPECT_THROW(learning_rates_text(meta_key), Error);
  LearningRates injected;
  injected[1] = {.learning_rate = 1.0, .scores = {}, .meta = {{"x", "1}), 2: EpochData(learningRate=1.0, error={'y': 2"}}};
  try {
    learning_rates_text(injected);
    FAIL() << "expected an Error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
  }
}

TEST(LearningRatesTest, WritesAndReadsAFile) {
  testing::TempDir dir;
  LearningRates rates;
  rates[3] = {.learning_rate = 0.5, .scores = {{"dev_score", 0.25}}, .meta = {}};
  write_learning_rates(dir / "learning_rates", rates);
  // One item of 58 characters: better_repr puts it on a line of its own.
  EXPECT_EQ(testing::read_file(dir / "learning_rates"),
            "{\n3: EpochData(learningRate=0.5, error={'dev_score': 0.25}),\n}\n");
  EXPECT_EQ(read_learning_rates(dir / "learning_rates"), rates);
  EXPECT_EQ(dir.list(), std::vector<std::string>{"learning_rates"});  // no temporary left
}

TEST(LearningRatesTest, MissingFileIsNotFound) {
  testing::TempDir dir;
  try {
    read_learning_rates(dir / "learning_rates");
    FAIL() << "expected an Error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kNotFound);
  }
}

// The file tests/interop/test_foreign_run_dirs.py eval()s as RETURNN's
// load() does (it runs this test with CKPT_LEARNING_RATES_OUT set); alone,
// it reads the file back here.
TEST(LearningRatesTest, WritesForPython) {
  LearningRates rates;
  rates[1] = {.learning_rate = 0.001, .scores = {{"dev_score", 1.5}, {"train_score", 2.0}}, .meta = {}};
  rates[2] = {.learning_rate = 1e-05,
              .scores = {{"dev_score", std::numeric_limits<double>::quiet_NaN()},
                         {"dev_error", std::numeric_limits<double>::infinity()},
                         {"it's \"quoted\"\n", -0.25},
                         {"caf\xc3\xa9/\xc3\xbc", 0.1 + 0.2}},
              .meta = {{"effective_learning_rate", "0.0005"}, {"note", "\"x'y\""}, {"list", "[1, (2, 3), None]"}}};
  rates[10] = {.learning_rate = 1e16, .scores = {}, .meta = {}};
  testing::TempDir dir;
  const char* requested = std::getenv("CKPT_LEARNING_RATES_OUT");
  const std::filesystem::path out = requested != nullptr ? std::filesystem::path(requested) : dir / "learning_rates";
  write_learning_rates(out, rates);
  const LearningRates back = read_learning_rates(out);
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(back.at(1), rates.at(1));
  EXPECT_EQ(back.at(2).meta, rates.at(2).meta);
  EXPECT_EQ(back.at(2).scores.at("caf\xc3\xa9/\xc3\xbc"), 0.1 + 0.2);
  EXPECT_EQ(back.at(10), rates.at(10));
}

struct Malformed {
  const char* name;
  const char* text;
  const char* where;    // "line L, column C"
  const char* message;  // a part of the message
};

class LearningRatesMalformedTest : public ::testing::TestWithParam<Malformed> {};

TEST_P(LearningRatesMalformedTest, IsCorruptNamingFileAndLine) {
  const Malformed& malformed = GetParam();
  try {
    parse_learning_rates(malformed.text, "/run/learning_rates");
    FAIL() << "expected kCorrupt for " << malformed.name;
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kCorrupt) << error.what();
    EXPECT_EQ(error.context().path, "/run/learning_rates");
    const std::string what = error.what();
    EXPECT_NE(what.find(malformed.where), std::string::npos) << what;
    EXPECT_NE(what.find(malformed.message), std::string::npos) << what;
  }
}

constexpr const char* kGood = "{1: EpochData(learningRate=0.1, error={'dev_score': 1.0})}";

INSTANTIATE_TEST_SUITE_P(
    OneDefectEach, LearningRatesMalformedTest,
    ::testing::Values(
        Malformed{"Empty", "", "line 1, column 1", "empty"},
        Malformed{"OnlyComment", "# nothing\n", "line 2, column 1", "empty"},
        Malformed{"NotADict", "[1, 2]", "line 1, column 1", "expected '{'"},
        Malformed{"Unclosed", "{1: EpochData(learningRate=0.1, error={'dev_score': 1.0})", "line 1, column 58",
                  "expected ',' or '}'"},
        Malformed{"Trailing", "{1: EpochData(learningRate=0.1)} x", "line 1, column 34", "text after"},
        Malformed{"FloatEpoch", "{1.5: EpochData(learningRate=0.1)}", "line 1, column 2", "epoch number"},
        Malformed{"StringEpoch", "{'1': EpochData(learningRate=0.1)}", "line 1, column 2", "epoch number"},
        Malformed{"HugeEpoch", "{99999999999999999999: EpochData(learningRate=0.1)}", "line 1, column 2", "out of range"},
        Malformed{"DuplicateEpoch", "{1: EpochData(learningRate=0.1),\n1: EpochData(learningRate=0.2)}",
                  "line 2, column 1", "epoch 1 appears twice"},
        Malformed{"NoColon", "{1 EpochData(learningRate=0.1)}", "line 1, column 4", "':'"},
        Malformed{"OtherCall", "{1: Epoch(learningRate=0.1)}", "line 1, column 5", "expected EpochData"},
        Malformed{"UnknownKeyword", "{1: EpochData(learningRate=0.1, lr=2)}", "line 1, column 33", "EpochData takes"},
        Malformed{"Positional", "{1: EpochData(0.1)}", "line 1, column 15", "EpochData takes"},
        Malformed{"TwiceKeyword", "{1: EpochData(learningRate=0.1, learning_rate=0.2)}", "line 1, column 33",
                  "given twice"},
        Malformed{"RateString", "{1: EpochData(learningRate='0.1')}", "line 1, column 28", "expected a number"},
        Malformed{"ScoreString", "{1: EpochData(learningRate=0.1, error={'dev': 'x'})}", "line 1, column 47",
                  "expected a number"},
        Malformed{"ScoreKeyNumber", "{1: EpochData(learningRate=0.1, error={1: 1.0})}", "line 1, column 40",
                  "expected a string"},
        Malformed{"DuplicateScore", "{1: EpochData(learningRate=0.1, error={'a': 1.0,\n 'a': 2.0})}", "line 2, column 2",
                  "appears twice"},
        Malformed{"UnterminatedString", "{1: EpochData(learningRate=0.1, error={'dev: 1.0})}", "line 1, column 40",
                  "unterminated string"},
        Malformed{"StringAcrossLines", "{1: EpochData(learningRate=0.1, error={'dev\n': 1.0})}", "line 1, column 40",
                  "unterminated string"},
        Malformed{"BadHexEscape", "{1: EpochData(learningRate=0.1, error={'\\xZZ': 1.0})}", "line 1, column 41",
                  "malformed \\x escape"},
        Malformed{"SurrogateEscape", "{1: EpochData(learningRate=0.1, error={'\\ud800': 1.0})}", "line 1, column 41",
                  "surrogate"},
        Malformed{"InvalidUtf8", "{1: EpochData(learningRate=0.1, error={'\xff': 1.0})}", "line 1, column 40",
                  "not valid UTF-8"},
        Malformed{"MalformedNumber", "{1: EpochData(learningRate=0.1.2)}", "line 1, column 28", "malformed number"},
        Malformed{"HexNumber", "{1: EpochData(learningRate=0x10)}", "line 1, column 28", "malformed number"},
        Malformed{"ComplexNumber", "{1: EpochData(learningRate=1j)}", "line 1, column 28", "malformed number"},
        Malformed{"UnknownName", "{1: EpochData(learningRate=foo)}", "line 1, column 28", "expected a number"},
        Malformed{"FloatOfWord", "{1: EpochData(learningRate=float('abc'))}", "line 1, column 34", "is not a number"},
        Malformed{"NumpyUnknown", "{1: EpochData(learningRate=np.array(1.0))}", "line 1, column 31",
                  "not a numpy scalar type"},
        Malformed{"NumpyThenUnclosedCall", "{1: EpochData(learningRate=np.float64(1.0)}", "line 1, column 43",
                  "expected ',' or ')' in EpochData"},
        Malformed{"MetaTooDeep",
                  "{1: EpochData(learningRate=0.1, error={':meta:x': [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]"
                  "]]]]]]]]]]]]]]]]})}",
                  "line 1, column", "nested deeper than 32"},
        Malformed{"MetaNotLiteral", "{1: EpochData(learningRate=0.1, error={':meta:x': os.system('x')})}",
                  "line 1, column 51", "expected a number"},
        Malformed{"ErrorList", "{1: EpochData(learningRate=0.1, error=[1.0])}", "line 1, column 39", "expected a number"},
        Malformed{"MissingComma", "{1: EpochData(learningRate=0.1) 2: EpochData(learningRate=0.1)}", "line 1, column 33",
                  "expected ',' or '}'"}),
    [](const ::testing::TestParamInfo<Malformed>& info) { return std::string(info.param.name); });

TEST(LearningRatesTest, GoodTextOfTheMalformedSuiteParses) {
  // The malformed cases each break this one in one place.
  EXPECT_EQ(parse_learning_rates(kGood).at(1).scores.at("dev_score"), 1.0);
}

TEST(LearningRatesTest, OverTheSizeLimitIsCorrupt) {
  const std::string text(kMaxLearningRatesBytes + 1, ' ');
  try {
    parse_learning_rates(text, "lr");
    FAIL() << "expected an Error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
    EXPECT_NE(std::string(error.what()).find("over ckpt's limit"), std::string::npos);
  }
}

TEST(LearningRatesTest, DeepNestingDoesNotOverflowTheStack) {
  std::string text = "{1: EpochData(learningRate=0.1, error={':meta:x': ";
  text += std::string(100000, '[');
  text += "})}";
  EXPECT_THROW(parse_learning_rates(text), Error);
  std::string calls = "{1: EpochData(learningRate=";
  for (int i = 0; i < 100000; ++i) calls += "float(";
  EXPECT_THROW(parse_learning_rates(calls), Error);
  std::string numpy = "{1: EpochData(learningRate=";
  for (int i = 0; i < 100000; ++i) numpy += "np.float64(";
  EXPECT_THROW(parse_learning_rates(numpy), Error);
}

}  // namespace
}  // namespace ckpt::detail
