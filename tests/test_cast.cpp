// Tests of ckpt::cast and of the conversion under it (src/tensor/cast.hpp: detail::can_cast and
// detail::convert).
//
// The floating formats are checked against a reference written here from the formats'
// definitions, independently of src/tensor/cast.cpp: values decoded with std::ldexp, and rounding
// done by brute force (the nearest of all the format's values, ties to the even code).

#include <boost/test/unit_test.hpp>

#include "tensor/cast.hpp"  // src/: detail::can_cast, detail::convert

#include <ckpt/adapt.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

BOOST_AUTO_TEST_SUITE(test_cast)

using ckpt::dtype;

namespace {

constexpr double inf = std::numeric_limits<double>::infinity();
constexpr double qnan = std::numeric_limits<double>::quiet_NaN();

std::uint64_t bits(double d) { return std::bit_cast<std::uint64_t>(d); }
std::uint32_t bits(float f) { return std::bit_cast<std::uint32_t>(f); }

/// `in` converted by ckpt::detail::convert, read back as `To`s.
template <class To, class From>
std::vector<To> conv(dtype from, const std::vector<From>& in, dtype to) {
  BOOST_REQUIRE_EQUAL(sizeof(From) * 8, ckpt::detail::bit_width(from));
  const std::size_t out_size = ckpt::detail::bit_width(to) / 8;
  std::vector<std::byte> out(in.size() * out_size);
  ckpt::detail::convert(from, std::as_bytes(std::span(in)), to, out, in.size());
  std::vector<To> result(out.size() / sizeof(To));
  if (!out.empty()) std::memcpy(result.data(), out.data(), out.size());
  return result;
}

template <class To, class From>
To conv1(dtype from, From x, dtype to) {
  return conv<To>(from, std::vector<From>{x}, to).at(0);
}

// ---------------------------------------------------------------- the reference formats

enum class kind { ieee, fn, fnuz, e8m0 };

struct format {
  dtype type;
  int ebits;
  int mbits;
  int bias;
  kind k;
  unsigned sign_bit;         // 0 for E8M0
  std::vector<double> pos;   // the values of codes 0, 1, ..., up to the largest finite
  double sentinel;           // the value the next code would have: above it all overflows

  [[nodiscard]] bool is_nan_code(unsigned code) const {
    const unsigned field_max = (1U << ebits) - 1;
    const unsigned mag = code & ~sign_bit;
    switch (k) {
      case kind::ieee: return (mag >> mbits) == field_max && (mag & ((1U << mbits) - 1)) != 0;
      case kind::fn: return mag == ((field_max << mbits) | ((1U << mbits) - 1));
      case kind::fnuz: return code == 0x80;
      case kind::e8m0: return code == 0xFF;
    }
    return false;
  }

  /// The value of `code`, from the definition.
  [[nodiscard]] double decode(unsigned code) const {
    if (is_nan_code(code)) {
      const bool negative = (k == kind::ieee || k == kind::fn) && (code & sign_bit) != 0;
      return negative ? -qnan : qnan;
    }
    if (k == kind::e8m0) return std::ldexp(1.0, static_cast<int>(code) - 127);
    const bool negative = (code & sign_bit) != 0;
    const int field = static_cast<int>((code & ~sign_bit) >> mbits);
    const int mant = static_cast<int>(code & ((1U << mbits) - 1));
    double mag = 0;
    if (k == kind::ieee && field == (1 << ebits) - 1) {
      mag = inf;
    } else if (field == 0) {
      mag = std::ldexp(static_cast<double>(mant), 1 - bias - mbits);
    } else {
      mag = std::ldexp(1.0 + std::ldexp(static_cast<double>(mant), -mbits), field - bias);
    }
    return negative ? -mag : mag;
  }

  /// The code nearest `v` (ties to the even code), or overflow, by brute force. NaN inputs
  /// are not handled here.
  [[nodiscard]] unsigned encode(double v) const {
    if (k == kind::e8m0 && (std::signbit(v) || v == 0)) return 0xFF;
    const bool negative = std::signbit(v);
    const double a = std::fabs(v);
    const std::size_t n = pos.size();
    std::size_t index = 0;
    if (a >= sentinel) {
      index = n;
    } else if (a > pos[0]) {
      const std::size_t hi = static_cast<std::size_t>(std::upper_bound(pos.begin(), pos.end(), a) - pos.begin());
      const std::size_t lo = hi - 1;
      const double mid = (pos[lo] + (hi < n ? pos[hi] : sentinel)) / 2;  // exact
      index = a < mid ? lo : a > mid ? hi : (lo % 2 == 0 ? lo : hi);
    }
    if (index == n) {  // overflow
      switch (k) {
        case kind::ieee: return static_cast<unsigned>(n) | (negative ? sign_bit : 0);
        case kind::fn: return static_cast<unsigned>(n) | (negative ? sign_bit : 0);  // NaN code
        case kind::fnuz: return 0x80;
        case kind::e8m0: return 0xFF;
      }
    }
    const auto code = static_cast<unsigned>(index);
    if (!negative) return code;
    if (k == kind::fnuz && code == 0) return 0;
    return code | sign_bit;
  }
};

format make_format(dtype type, int ebits, int mbits, int bias, kind k) {
  format f{type, ebits, mbits, bias, k, k == kind::e8m0 ? 0U : 1U << (ebits + mbits), {}, 0};
  for (unsigned code = 0;; ++code) {
    const double v = f.decode(code);
    if (std::isnan(v) || std::isinf(v) || code >= (f.sign_bit == 0 ? 256U : f.sign_bit)) break;
    f.pos.push_back(v);
  }
  const std::size_t n = f.pos.size();
  f.sentinel = k == kind::e8m0 ? 2 * f.pos[n - 1] : 2 * f.pos[n - 1] - f.pos[n - 2];
  return f;
}

const format& f8_e4m3() {
  static const format f = make_format(dtype::f8_e4m3, 4, 3, 7, kind::fn);
  return f;
}
const format& f8_e5m2() {
  static const format f = make_format(dtype::f8_e5m2, 5, 2, 15, kind::ieee);
  return f;
}
const format& f8_e8m0() {
  static const format f = make_format(dtype::f8_e8m0, 8, 0, 127, kind::e8m0);
  return f;
}
const format& f8_e4m3fnuz() {
  static const format f = make_format(dtype::f8_e4m3fnuz, 4, 3, 8, kind::fnuz);
  return f;
}
const format& f8_e5m2fnuz() {
  static const format f = make_format(dtype::f8_e5m2fnuz, 5, 2, 16, kind::fnuz);
  return f;
}
const format& f16() {
  static const format f = make_format(dtype::f16, 5, 10, 15, kind::ieee);
  return f;
}
const format& bf16() {
  static const format f = make_format(dtype::bf16, 8, 7, 127, kind::ieee);
  return f;
}

std::vector<const format*> f8_formats() {
  return {&f8_e4m3(), &f8_e5m2(), &f8_e8m0(), &f8_e4m3fnuz(), &f8_e5m2fnuz()};
}
std::vector<const format*> small_formats() {
  return {&f8_e4m3(), &f8_e5m2(), &f8_e8m0(), &f8_e4m3fnuz(), &f8_e5m2fnuz(), &f16(), &bf16()};
}

std::vector<unsigned> all_codes(const format& f) {
  std::vector<unsigned> codes(f.ebits + f.mbits + (f.sign_bit != 0 ? 1 : 0) == 8 ? 256 : 65536);
  for (unsigned i = 0; i < codes.size(); ++i) codes[i] = i;
  return codes;
}

/// Codes of format `f` (8 or 16 bits) converted to `to`, as raw elements of type To.
template <class To>
std::vector<To> from_codes(const format& f, const std::vector<unsigned>& codes, dtype to) {
  if (ckpt::detail::bit_width(f.type) == 8) {
    std::vector<std::uint8_t> in(codes.begin(), codes.end());
    return conv<To>(f.type, in, to);
  }
  std::vector<std::uint16_t> in(codes.begin(), codes.end());
  return conv<To>(f.type, in, to);
}

/// Values converted to format `f`, as codes.
template <class From>
std::vector<unsigned> to_codes(dtype from, const std::vector<From>& in, const format& f) {
  if (ckpt::detail::bit_width(f.type) == 8) {
    const auto out = conv<std::uint8_t>(from, in, f.type);
    return {out.begin(), out.end()};
  }
  const auto out = conv<std::uint16_t>(from, in, f.type);
  return {out.begin(), out.end()};
}

/// Codes of format `from` converted to format `to`, as codes.
std::vector<unsigned> to_codes_from_codes(const format& from, const std::vector<unsigned>& codes,
                                          const format& to) {
  if (ckpt::detail::bit_width(to.type) == 8) {
    const auto out = from_codes<std::uint8_t>(from, codes, to.type);
    return {out.begin(), out.end()};
  }
  const auto out = from_codes<std::uint16_t>(from, codes, to.type);
  return {out.begin(), out.end()};
}

/// Inputs that probe every rounding boundary of `f`: its values, the midpoints between
/// neighbours, the doubles next to the midpoints, both signs, and specials.
std::vector<double> probes(const format& f) {
  std::vector<double> out{0.0, -0.0, inf, -inf, 1e300, -1e300, 5e-324, -5e-324, 1e-300};
  std::vector<double> values = f.pos;
  values.push_back(f.sentinel);
  for (std::size_t i = 0; i < values.size(); ++i) {
    out.push_back(values[i]);
    const double mid = i + 1 < values.size() ? (values[i] + values[i + 1]) / 2 : 1.5 * values[i];
    out.push_back(mid);
    out.push_back(std::nextafter(mid, 0.0));
    out.push_back(std::nextafter(mid, inf));
    const auto fmid = static_cast<float>(mid);
    if (static_cast<double>(fmid) == mid) {
      out.push_back(static_cast<double>(std::nextafter(fmid, 0.0F)));
      out.push_back(static_cast<double>(std::nextafter(fmid, std::numeric_limits<float>::infinity())));
    }
  }
  out.push_back(f.pos[1] / 2);
  out.push_back(f.pos[1] / 3);
  out.push_back(f.pos[0] / 2);
  const std::size_t n = out.size();
  for (std::size_t i = 0; i < n; ++i) out.push_back(-out[i]);
  return out;
}

void check_encoding(const format& f, const std::vector<double>& in, const std::vector<unsigned>& got,
                    const std::string& what) {
  BOOST_REQUIRE_EQUAL(in.size(), got.size());
  std::size_t failures = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    bool ok = false;
    unsigned expected = 0;
    if (std::isnan(in[i])) {
      ok = f.is_nan_code(got[i]);
    } else {
      expected = f.encode(in[i]);
      ok = got[i] == expected;
    }
    if (!ok && ++failures <= 10) {
      BOOST_ERROR(what << " to " << ckpt::to_string(f.type) << ": " << std::hexfloat << in[i]
                       << std::defaultfloat << " gave 0x" << std::hex << got[i] << ", expected 0x"
                       << expected << std::dec);
    }
  }
  BOOST_CHECK_EQUAL(failures, 0U);
}

bool message_is(const std::invalid_argument& e, const std::string& expected) {
  BOOST_CHECK_EQUAL(std::string(e.what()), expected);
  return std::string(e.what()) == expected;
}

std::vector<std::byte> hex(const std::string& h) {
  std::vector<std::byte> out;
  for (std::size_t i = 0; i + 1 < h.size(); i += 2) {
    out.push_back(static_cast<std::byte>(std::stoi(h.substr(i, 2), nullptr, 16)));
  }
  return out;
}

template <class T>
std::vector<T> typed(const std::vector<std::byte>& b) {
  std::vector<T> out(b.size() / sizeof(T));
  std::memcpy(out.data(), b.data(), out.size() * sizeof(T));
  return out;
}

}  // namespace

// ================================================================ F8 decoding

BOOST_AUTO_TEST_CASE(f8_decode_every_code_matches_the_definition) {
  for (const format* f : f8_formats()) {
    const auto codes = all_codes(*f);
    const auto as_f64 = from_codes<double>(*f, codes, dtype::f64);
    const auto as_f32 = from_codes<float>(*f, codes, dtype::f32);
    for (const unsigned code : codes) {
      const double expected = f->decode(code);
      const double got64 = as_f64[code];
      const double got32 = static_cast<double>(as_f32[code]);
      if (std::isnan(expected)) {
        BOOST_CHECK_MESSAGE(std::isnan(got64) && std::isnan(as_f32[code]),
                            ckpt::to_string(f->type) << " 0x" << std::hex << code << " is NaN");
        BOOST_CHECK_EQUAL(std::signbit(got64), std::signbit(expected));
        BOOST_CHECK_EQUAL(std::signbit(as_f32[code]), std::signbit(expected));
      } else {
        BOOST_CHECK_MESSAGE(bits(got64) == bits(expected) && bits(got32) == bits(expected),
                            ckpt::to_string(f->type) << " 0x" << std::hex << code << ": got "
                                                     << std::hexfloat << got64 << " and " << got32
                                                     << ", expected " << expected);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(f8_landmark_codes_decode_to_the_values_the_specs_give) {
  // OCP OFP8 / MX and ml_dtypes: largest, smallest normal and subnormal, specials.
  auto d = [](dtype t, std::uint8_t code) { return conv1<double>(t, code, dtype::f64); };
  BOOST_CHECK_EQUAL(d(dtype::f8_e4m3, 0x7E), 448.0);
  BOOST_CHECK_EQUAL(d(dtype::f8_e4m3, 0xFE), -448.0);
  BOOST_CHECK_EQUAL(d(dtype::f8_e4m3, 0x08), 0x1p-6);
  BOOST_CHECK_EQUAL(d(dtype::f8_e4m3, 0x01), 0x1p-9);
  BOOST_CHECK_EQUAL(d(dtype::f8_e4m3, 0x78), 256.0);  // S.1111.000 is a number, not infinity
  BOOST_CHECK(std::isnan(d(dtype::f8_e4m3, 0x7F)));
  BOOST_CHECK(std::isnan(d(dtype::f8_e4m3, 0xFF)));
  BOOST_CHECK_EQUAL(bits(d(dtype::f8_e4m3, 0x80)), bits(-0.0));
  BOOST_CHECK_EQUAL(d(dtype::f8_e5m2, 0x7B), 57344.0);
  BOOST_CHECK_EQUAL(d(dtype::f8_e5m2, 0x7C), inf);
  BOOST_CHECK_EQUAL(d(dtype::f8_e5m2, 0xFC), -inf);
  BOOST_CHECK(std::isnan(d(dtype::f8_e5m2, 0x7D)));
  BOOST_CHECK_EQUAL(d(dtype::f8_e5m2, 0x04), 0x1p-14);
  BOOST_CHECK_EQUAL(d(dtype::f8_e5m2, 0x01), 0x1p-16);
  BOOST_CHECK_EQUAL(d(dtype::f8_e4m3fnuz, 0x7F), 240.0);
  BOOST_CHECK_EQUAL(d(dtype::f8_e4m3fnuz, 0x08), 0x1p-7);
  BOOST_CHECK_EQUAL(d(dtype::f8_e4m3fnuz, 0x01), 0x1p-10);
  BOOST_CHECK_EQUAL(d(dtype::f8_e4m3fnuz, 0xFF), -240.0);
  BOOST_CHECK(std::isnan(d(dtype::f8_e4m3fnuz, 0x80)));
  BOOST_CHECK_EQUAL(d(dtype::f8_e5m2fnuz, 0x7F), 57344.0);
  BOOST_CHECK_EQUAL(d(dtype::f8_e5m2fnuz, 0x04), 0x1p-15);
  BOOST_CHECK_EQUAL(d(dtype::f8_e5m2fnuz, 0x01), 0x1p-17);
  BOOST_CHECK(std::isnan(d(dtype::f8_e5m2fnuz, 0x80)));
  BOOST_CHECK_EQUAL(d(dtype::f8_e8m0, 0x7F), 1.0);
  BOOST_CHECK_EQUAL(d(dtype::f8_e8m0, 0x00), 0x1p-127);
  BOOST_CHECK_EQUAL(d(dtype::f8_e8m0, 0xFE), 0x1p127);
  BOOST_CHECK(std::isnan(d(dtype::f8_e8m0, 0xFF)));
  // The single-NaN formats decode their NaN to +NaN.
  BOOST_CHECK(!std::signbit(d(dtype::f8_e4m3fnuz, 0x80)));
  BOOST_CHECK(!std::signbit(d(dtype::f8_e8m0, 0xFF)));
}

BOOST_AUTO_TEST_CASE(f8_codes_round_trip_bit_exactly_through_wider_floats) {
  for (const format* f : f8_formats()) {
    const auto codes = all_codes(*f);
    std::vector<std::uint8_t> in(codes.begin(), codes.end());
    std::vector<dtype> via{dtype::f32, dtype::f64, dtype::bf16, dtype::c64};
    if (f->type != dtype::f8_e8m0) via.push_back(dtype::f16);  // 2^-127..2^127 is not in F16
    for (const dtype wide : via) {
      const auto widened = conv<std::byte>(f->type, in, wide);
      std::vector<std::byte> back(in.size());
      ckpt::detail::convert(wide, widened, f->type, back, in.size());
      for (std::size_t i = 0; i < in.size(); ++i) {
        const auto code = static_cast<unsigned>(back[i]);
        if (f->is_nan_code(in[i])) BOOST_CHECK(f->is_nan_code(code));  // NaN stays NaN
        BOOST_CHECK_MESSAGE(code == in[i], ckpt::to_string(f->type)
                                               << " 0x" << std::hex << unsigned{in[i]} << " via "
                                               << ckpt::to_string(wide) << " came back as 0x"
                                               << code);
      }
    }
  }
}

// ================================================================ rounding to narrow floats

BOOST_AUTO_TEST_CASE(rounding_from_f64_and_f32_matches_brute_force) {
  for (const format* f : small_formats()) {
    const std::vector<double> in = probes(*f);
    check_encoding(*f, in, to_codes(dtype::f64, in, *f), "F64");
    std::vector<float> in32;
    std::vector<double> in32_exact;
    for (const double v : in) {
      if (std::isnan(v) || static_cast<double>(static_cast<float>(v)) == v) {
        in32.push_back(static_cast<float>(v));
        in32_exact.push_back(v);
      }
    }
    check_encoding(*f, in32_exact, to_codes(dtype::f32, in32, *f), "F32");
    std::vector<std::complex<float>> in64c(in32.begin(), in32.end());
    check_encoding(*f, in32_exact, to_codes(dtype::c64, in64c, *f), "C64");
  }
}

BOOST_AUTO_TEST_CASE(random_f32_and_f64_round_like_brute_force) {
  std::mt19937_64 rng(12345);
  for (const format* f : small_formats()) {
    // Exponents from a little below the smallest subnormal to a little above the largest.
    std::uniform_int_distribution<int> exponent(std::ilogb(f->pos[1]) - 3, std::ilogb(f->pos.back()) + 3);
    std::vector<double> in64;
    std::vector<float> in32;
    std::vector<double> in32_exact;
    for (int i = 0; i < 100000; ++i) {
      const std::uint64_t r = rng();
      const double m = std::bit_cast<double>((r & 0x800F'FFFF'FFFF'FFFFULL) | 0x3FF0'0000'0000'0000ULL);  // ±[1, 2)
      in64.push_back(std::ldexp(m, exponent(rng)));
      const float x = std::ldexp(static_cast<float>(m), std::clamp(exponent(rng), -149, 127));
      in32.push_back(x);
      in32_exact.push_back(static_cast<double>(x));
      const auto y = std::bit_cast<float>(static_cast<std::uint32_t>(r >> 32));  // any float
      if (!std::isnan(y)) {
        in32.push_back(y);
        in32_exact.push_back(static_cast<double>(y));
      }
    }
    check_encoding(*f, in32_exact, to_codes(dtype::f32, in32, *f), "random F32");
    check_encoding(*f, in64, to_codes(dtype::f64, in64, *f), "random F64");
  }
}

BOOST_AUTO_TEST_CASE(every_16_and_8_bit_code_converts_to_every_narrow_format_like_brute_force) {
  for (const format* from : small_formats()) {
    const auto codes = all_codes(*from);
    std::vector<double> values;
    for (const unsigned c : codes) values.push_back(from->decode(c));
    for (const format* to : small_formats()) {
      if (to == from) continue;
      check_encoding(*to, values, to_codes_from_codes(*from, codes, *to), std::string(ckpt::to_string(from->type)));
    }
  }
}

BOOST_AUTO_TEST_CASE(halfway_values_round_to_the_even_code_and_f64_never_rounds_through_f32) {
  // F32 -> F16: halfway cases go to the even code.
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::f32, 1.0F + 0x1p-11F, dtype::f16), 0x3C00);
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::f32, 1.0F + 3 * 0x1p-11F, dtype::f16), 0x3C02);
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::f32, 1.0F + 0x1p-11F + 0x1p-23F, dtype::f16), 0x3C01);
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::f32, -(1.0F + 0x1p-11F), dtype::f16), 0xBC00);
  // F32 -> BF16.
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::f32, 1.0F + 0x1p-8F, dtype::bf16), 0x3F80);
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::f32, 1.0F + 3 * 0x1p-8F, dtype::bf16), 0x3F82);
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::f32, 1.0F + 0x1p-8F + 0x1p-23F, dtype::bf16), 0x3F81);
  // F64 -> F16 / BF16: ties, and values just above a tie that would round to the tie (and then
  // to even, the wrong way) if the conversion went through F32.
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::f64, 1.0 + 0x1p-11, dtype::f16), 0x3C00);
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::f64, 1.0 + 0x1p-11 + 0x1p-40, dtype::f16), 0x3C01);
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::f64, 1.0 + 3 * 0x1p-11 - 0x1p-40, dtype::f16), 0x3C01);
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::f64, 1.0 + 0x1p-8 + 0x1p-40, dtype::bf16), 0x3F81);
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::f64, 1.0 + 0x1p-8, dtype::bf16), 0x3F80);
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::f64, -(1.0 + 0x1p-8 + 0x1p-52), dtype::bf16), 0xBF81);
  // F64 -> F32.
  BOOST_CHECK_EQUAL(conv1<std::uint32_t>(dtype::f64, 1.0 + 0x1p-24, dtype::f32), bits(1.0F));
  BOOST_CHECK_EQUAL(conv1<std::uint32_t>(dtype::f64, 1.0 + 0x1p-24 + 0x1p-50, dtype::f32), 0x3F800001U);
  BOOST_CHECK_EQUAL(conv1<std::uint32_t>(dtype::f64, 1.0 + 3 * 0x1p-24, dtype::f32), 0x3F800002U);
  // F64 -> F8: a double just above an F8 tie, which F32 would round onto the tie.
  BOOST_CHECK_EQUAL(conv1<std::uint8_t>(dtype::f64, 1.0 + 0x1p-4 + 0x1p-40, dtype::f8_e4m3), 0x39);
  BOOST_CHECK_EQUAL(conv1<std::uint8_t>(dtype::f64, 1.0 + 0x1p-4, dtype::f8_e4m3), 0x38);
}

BOOST_AUTO_TEST_CASE(integers_round_once_to_narrow_floats) {
  // 2^62 + 2^54 + 1: just above a BF16 tie; via F64 or F32 (which drop the +1) it would
  // round to even, down to 2^62.
  const std::int64_t big = (std::int64_t{1} << 62) + (std::int64_t{1} << 54) + 1;
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::i64, big, dtype::bf16), 0x5E81);
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::i64, -big, dtype::bf16), 0xDE81);
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::i64, big - 1, dtype::bf16), 0x5E80);  // the tie: even
  // 2^63 + 2^62 + 1 is just above the E8M0 tie between 2^63 (0xBE) and 2^64 (0xBF); as a
  // double it would be the tie itself, which goes to the even 0xBE.
  const std::uint64_t big8 = (std::uint64_t{1} << 63) + (std::uint64_t{1} << 62);
  BOOST_CHECK_EQUAL(conv1<std::uint8_t>(dtype::u64, big8 + 1, dtype::f8_e8m0), 0xBF);
  BOOST_CHECK_EQUAL(conv1<std::uint8_t>(dtype::u64, big8, dtype::f8_e8m0), 0xBE);
  BOOST_CHECK_EQUAL(conv1<std::uint8_t>(dtype::u64, big8, dtype::f8_e5m2), 0x7C);  // overflow
  BOOST_CHECK_EQUAL(conv1<std::uint8_t>(dtype::i32, 18432, dtype::f8_e5m2), 0x74);  // tie -> 2^14
  BOOST_CHECK_EQUAL(conv1<std::uint8_t>(dtype::i32, 18433, dtype::f8_e5m2), 0x75);
  BOOST_CHECK_EQUAL(conv1<std::uint8_t>(dtype::i32, -464, dtype::f8_e4m3), 0xFE);   // tie -> 448
  BOOST_CHECK_EQUAL(conv1<std::uint8_t>(dtype::i32, 465, dtype::f8_e4m3), 0x7F);    // NaN
  BOOST_CHECK_EQUAL(conv1<std::uint8_t>(dtype::i32, -1000, dtype::f8_e4m3fnuz), 0x80);
  // F16.
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::i32, 2049, dtype::f16), 0x6800);  // tie -> 2048
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::i32, 2051, dtype::f16), 0x6802);  // tie -> 2052
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::i32, 65504, dtype::f16), 0x7BFF);
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::i32, 65519, dtype::f16), 0x7BFF);
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::i32, 65520, dtype::f16), 0x7C00);  // tie -> inf
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::i32, -65520, dtype::f16), 0xFC00);
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::u64, ~std::uint64_t{0}, dtype::f16), 0x7C00);
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::u64, ~std::uint64_t{0}, dtype::bf16), 0x5F80);  // 2^64
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::i64, std::numeric_limits<std::int64_t>::min(), dtype::bf16), 0xDF00);
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::i8, std::int8_t{0}, dtype::f16), 0x0000);  // +0
  // F32 and F64.
  BOOST_CHECK_EQUAL(conv1<float>(dtype::u64, ~std::uint64_t{0}, dtype::f32), 0x1p64F);
  BOOST_CHECK_EQUAL(conv1<float>(dtype::u64, (std::uint64_t{1} << 63) + (std::uint64_t{1} << 39), dtype::f32), 0x1p63F);
  BOOST_CHECK_EQUAL(conv1<float>(dtype::u64, (std::uint64_t{1} << 63) + (std::uint64_t{1} << 39) + 1, dtype::f32), 0x1p63F + 0x1p40F);
  BOOST_CHECK_EQUAL(conv1<double>(dtype::i64, (std::int64_t{1} << 53) + 1, dtype::f64), 0x1p53);
  BOOST_CHECK_EQUAL(conv1<double>(dtype::i64, (std::int64_t{1} << 53) + 3, dtype::f64), 0x1p53 + 4);
  BOOST_CHECK_EQUAL(conv1<double>(dtype::i64, std::numeric_limits<std::int64_t>::min(), dtype::f64), -0x1p63);
  // Small integers agree with the double route (where that is exact).
  std::vector<std::int64_t> ints;
  for (std::int64_t i = -70000; i <= 70000; i += 7) ints.push_back(i);
  std::vector<double> as_doubles(ints.begin(), ints.end());
  for (const format* f : small_formats()) {
    BOOST_CHECK(to_codes(dtype::i64, ints, *f) == to_codes(dtype::f64, as_doubles, *f));
  }
  // E8M0 of integers.
  BOOST_CHECK_EQUAL(conv1<std::uint8_t>(dtype::i32, 1, dtype::f8_e8m0), 0x7F);
  BOOST_CHECK_EQUAL(conv1<std::uint8_t>(dtype::i32, 0, dtype::f8_e8m0), 0xFF);
  BOOST_CHECK_EQUAL(conv1<std::uint8_t>(dtype::i32, -4, dtype::f8_e8m0), 0xFF);
  BOOST_CHECK_EQUAL(conv1<std::uint8_t>(dtype::i32, 3, dtype::f8_e8m0), 0x80);  // tie: 2, even code
  BOOST_CHECK_EQUAL(conv1<std::uint8_t>(dtype::i32, 6, dtype::f8_e8m0), 0x82);  // tie: 8, even code
}

BOOST_AUTO_TEST_CASE(overflow_goes_to_infinity_or_nan_and_underflow_rounds_through_the_subnormals) {
  auto h = [](double v) { return conv1<std::uint16_t>(dtype::f64, v, dtype::f16); };
  auto hf = [](float v) { return conv1<std::uint16_t>(dtype::f32, v, dtype::f16); };
  BOOST_CHECK_EQUAL(hf(65504.0F), 0x7BFF);
  BOOST_CHECK_EQUAL(hf(65519.99F), 0x7BFF);
  BOOST_CHECK_EQUAL(hf(65520.0F), 0x7C00);
  BOOST_CHECK_EQUAL(hf(-1e10F), 0xFC00);
  BOOST_CHECK_EQUAL(hf(0x1p-24F), 0x0001);           // smallest subnormal
  BOOST_CHECK_EQUAL(hf(0x1p-25F), 0x0000);           // tie -> even 0
  BOOST_CHECK_EQUAL(hf(0x1p-25F + 0x1p-40F), 0x0001);
  BOOST_CHECK_EQUAL(hf(3 * 0x1p-25F), 0x0002);       // tie -> even 2
  BOOST_CHECK_EQUAL(hf(-0x1p-26F), 0x8000);          // -0
  BOOST_CHECK_EQUAL(hf(0x1p-14F - 0x1p-25F), 0x0400);  // tie between 0x3FF and 0x400
  BOOST_CHECK_EQUAL(hf(0x1p-14F - 0x1p-24F), 0x03FF);  // largest subnormal
  BOOST_CHECK_EQUAL(hf(1e-8F), 0x0000);
  BOOST_CHECK_EQUAL(h(1e-300), 0x0000);
  BOOST_CHECK_EQUAL(h(-5e-324), 0x8000);
  BOOST_CHECK_EQUAL(h(1e300), 0x7C00);
  // BF16.
  auto b = [](float v) { return conv1<std::uint16_t>(dtype::f32, v, dtype::bf16); };
  BOOST_CHECK_EQUAL(b(std::numeric_limits<float>::max()), 0x7F80);  // rounds up to inf
  BOOST_CHECK_EQUAL(b(0x1.FEp127F), 0x7F7F);                        // largest BF16
  BOOST_CHECK_EQUAL(b(0x1p-133F), 0x0001);                          // smallest BF16 subnormal
  BOOST_CHECK_EQUAL(b(0x1p-134F), 0x0000);                          // tie -> 0
  BOOST_CHECK_EQUAL(b(0x1.8p-133F), 0x0002);                        // tie -> even 2
  BOOST_CHECK_EQUAL(b(-0x1p-149F), 0x8000);
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::f64, 0x1.FEFp127, dtype::bf16), 0x7F7F);
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::f64, 0x1.FFp127, dtype::bf16), 0x7F80);  // tie -> inf
  // F64 -> F32 around the subnormal range and the top.
  auto s = [](double v) { return conv1<std::uint32_t>(dtype::f64, v, dtype::f32); };
  BOOST_CHECK_EQUAL(s(0x1p-149), 0x00000001U);
  BOOST_CHECK_EQUAL(s(0x1p-150), 0x00000000U);  // tie -> 0
  BOOST_CHECK_EQUAL(s(0x1p-150 + 0x1p-200), 0x00000001U);
  BOOST_CHECK_EQUAL(s(3 * 0x1p-150), 0x00000002U);
  BOOST_CHECK_EQUAL(s(-0x1p-151), 0x80000000U);
  BOOST_CHECK_EQUAL(s(0x1p-126 - 0x1p-150), 0x00800000U);  // tie between 0x7FFFFF and 0x800000
  BOOST_CHECK_EQUAL(s(0x1p-126 - 0x1p-149), 0x007FFFFFU);
  BOOST_CHECK_EQUAL(s(5e-324), 0x00000000U);
  BOOST_CHECK_EQUAL(s(std::numeric_limits<double>::max()), 0x7F800000U);
  BOOST_CHECK_EQUAL(s(-std::numeric_limits<double>::max()), 0xFF800000U);
  BOOST_CHECK_EQUAL(s(0x1.FFFFFEFp127), 0x7F7FFFFFU);  // below the tie: FLT_MAX
  BOOST_CHECK_EQUAL(s(0x1.FFFFFFp127), 0x7F800000U);   // the tie: to inf
  // Subnormal F32 -> F64 and back, exactly.
  for (std::uint32_t m : {1U, 2U, 3U, 0x123456U, 0x7FFFFFU, 0x80000001U, 0x807FFFFFU}) {
    const auto f = std::bit_cast<float>(m);
    const auto d = conv1<double>(dtype::f32, f, dtype::f64);
    BOOST_CHECK_EQUAL(bits(d), bits(static_cast<double>(f)));
    BOOST_CHECK_EQUAL(conv1<std::uint32_t>(dtype::f64, d, dtype::f32), m);
  }
  // F8 formats without infinities: overflow (and infinity) is NaN, as in ml_dtypes / PyTorch.
  auto e43 = [](double v) { return conv1<std::uint8_t>(dtype::f64, v, dtype::f8_e4m3); };
  BOOST_CHECK_EQUAL(e43(448), 0x7E);
  BOOST_CHECK_EQUAL(e43(464), 0x7E);                          // tie -> even 0x7E
  BOOST_CHECK_EQUAL(e43(std::nextafter(464.0, inf)), 0x7F);   // NaN
  BOOST_CHECK_EQUAL(e43(-500), 0xFF);
  BOOST_CHECK_EQUAL(e43(inf), 0x7F);
  BOOST_CHECK_EQUAL(e43(-inf), 0xFF);
  BOOST_CHECK_EQUAL(e43(-0.0), 0x80);
  BOOST_CHECK_EQUAL(e43(0x1p-10), 0x00);  // tie -> 0
  BOOST_CHECK_EQUAL(e43(-0x1p-9), 0x81);
  auto e52 = [](double v) { return conv1<std::uint8_t>(dtype::f64, v, dtype::f8_e5m2); };
  BOOST_CHECK_EQUAL(e52(57344), 0x7B);
  BOOST_CHECK_EQUAL(e52(61439), 0x7B);
  BOOST_CHECK_EQUAL(e52(61440), 0x7C);  // tie between 0x7B and 0x7C (2^16): even, infinity
  BOOST_CHECK_EQUAL(e52(-inf), 0xFC);
  BOOST_CHECK_EQUAL(e52(0x1p-17), 0x00);
  BOOST_CHECK_EQUAL(e52(-0x1.8p-17), 0x81);
  auto z43 = [](double v) { return conv1<std::uint8_t>(dtype::f64, v, dtype::f8_e4m3fnuz); };
  BOOST_CHECK_EQUAL(z43(240), 0x7F);
  BOOST_CHECK_EQUAL(z43(247.99), 0x7F);
  BOOST_CHECK_EQUAL(z43(248), 0x80);    // tie rounds up, past the largest: NaN
  BOOST_CHECK_EQUAL(z43(-1e6), 0x80);
  BOOST_CHECK_EQUAL(z43(inf), 0x80);
  BOOST_CHECK_EQUAL(z43(-0.0), 0x00);   // no -0
  BOOST_CHECK_EQUAL(z43(-0x1p-12), 0x00);
  BOOST_CHECK_EQUAL(z43(-0x1p-10), 0x81);
  BOOST_CHECK_EQUAL(z43(qnan), 0x80);
  BOOST_CHECK_EQUAL(z43(-qnan), 0x80);
  auto z52 = [](double v) { return conv1<std::uint8_t>(dtype::f64, v, dtype::f8_e5m2fnuz); };
  BOOST_CHECK_EQUAL(z52(57344), 0x7F);
  BOOST_CHECK_EQUAL(z52(61440), 0x80);
  BOOST_CHECK_EQUAL(z52(-0.0), 0x00);
  BOOST_CHECK_EQUAL(z52(0x1p-17), 0x01);
  auto e80 = [](double v) { return conv1<std::uint8_t>(dtype::f64, v, dtype::f8_e8m0); };
  BOOST_CHECK_EQUAL(e80(1), 0x7F);
  BOOST_CHECK_EQUAL(e80(1.5), 0x80);    // tie between 0x7F and 0x80: even code
  BOOST_CHECK_EQUAL(e80(3.0), 0x80);    // tie between 0x80 and 0x81: even code
  BOOST_CHECK_EQUAL(e80(0.75), 0x7E);
  BOOST_CHECK_EQUAL(e80(1.51), 0x80);
  BOOST_CHECK_EQUAL(e80(1.49), 0x7F);
  BOOST_CHECK_EQUAL(e80(0x1p127), 0xFE);
  BOOST_CHECK_EQUAL(e80(0x1.8p127), 0xFE);  // tie, even
  BOOST_CHECK_EQUAL(e80(0x1.9p127), 0xFF);  // overflow: NaN
  BOOST_CHECK_EQUAL(e80(0x1p-127), 0x00);
  BOOST_CHECK_EQUAL(e80(0x1p-140), 0x00);   // nearest value is 2^-127
  BOOST_CHECK_EQUAL(e80(5e-324), 0x00);
  BOOST_CHECK_EQUAL(e80(0.0), 0xFF);        // no zero
  BOOST_CHECK_EQUAL(e80(-0.0), 0xFF);
  BOOST_CHECK_EQUAL(e80(-1.0), 0xFF);       // no sign
  BOOST_CHECK_EQUAL(e80(inf), 0xFF);
}

BOOST_AUTO_TEST_CASE(nans_keep_their_sign_and_payload_and_widen_and_narrow_back_bit_exactly) {
  // Signed NaNs keep their sign; payload leading bits are kept, else the quiet bit is set.
  BOOST_CHECK_EQUAL(conv1<std::uint32_t>(dtype::f64, -qnan, dtype::f32), 0xFFC00000U);
  BOOST_CHECK_EQUAL(conv1<std::uint32_t>(dtype::f64, std::bit_cast<double>(0x7FF0'0000'0000'0001ULL), dtype::f32), 0x7FC00000U);
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::f64, -qnan, dtype::f16), 0xFE00);
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::f64, qnan, dtype::bf16), 0x7FC0);
  BOOST_CHECK_EQUAL(conv1<std::uint8_t>(dtype::f64, -qnan, dtype::f8_e4m3), 0xFF);
  BOOST_CHECK_EQUAL(conv1<std::uint8_t>(dtype::f64, qnan, dtype::f8_e5m2), 0x7E);
  BOOST_CHECK_EQUAL(conv1<std::uint8_t>(dtype::f64, qnan, dtype::f8_e8m0), 0xFF);
  BOOST_CHECK_EQUAL(conv1<std::uint8_t>(dtype::f32, std::bit_cast<float>(0xFF800001U), dtype::f8_e5m2), 0xFE);
  // Widening and narrowing back restores every bit, signalling NaNs too.
  for (const std::uint32_t nan_bits : {0x7F800001U, 0xFF800001U, 0x7FC00000U, 0x7FBFFFFFU, 0xFFFFFFFFU}) {
    const auto f = std::bit_cast<float>(nan_bits);
    const auto d = conv1<std::uint64_t>(dtype::f32, f, dtype::f64);
    BOOST_CHECK(std::isnan(std::bit_cast<double>(d)));
    BOOST_CHECK_EQUAL(conv1<std::uint32_t>(dtype::f64, std::bit_cast<double>(d), dtype::f32), nan_bits);
  }
  for (std::uint32_t h = 0x7C01; h <= 0x7FFF; ++h) {
    for (const std::uint32_t s : {0U, 0x8000U}) {
      const auto code = static_cast<std::uint16_t>(h | s);
      const auto f = conv1<float>(dtype::f16, code, dtype::f32);
      BOOST_REQUIRE(std::isnan(f));
      BOOST_REQUIRE_EQUAL(conv1<std::uint16_t>(dtype::f32, f, dtype::f16), code);
      const auto d = conv1<double>(dtype::f16, code, dtype::f64);
      BOOST_REQUIRE_EQUAL(conv1<std::uint16_t>(dtype::f64, d, dtype::f16), code);
    }
  }
}

// ================================================================ to and between integers

BOOST_AUTO_TEST_CASE(floating_to_integer_truncates_and_saturates) {
  const std::vector<float> in{127.9F, 128.0F, 1e10F, -128.9F, -129.0F, -1e10F, -0.9F, 2.9F, -2.9F,
                              std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(), -0.0F, 0x1p-149F};
  const std::vector<std::int8_t> i8{127, 127, 127, -128, -128, -128, 0, 2, -2, 0, 127, -128, 0, 0};
  BOOST_CHECK(conv<std::int8_t>(dtype::f32, in, dtype::i8) == i8);
  const std::vector<std::uint8_t> u8{127, 128, 255, 0, 0, 0, 0, 2, 0, 0, 255, 0, 0, 0};
  BOOST_CHECK(conv<std::uint8_t>(dtype::f32, in, dtype::u8) == u8);
  const std::vector<std::int32_t> i32{127, 128, std::numeric_limits<std::int32_t>::max(), -128, -129,
                                      std::numeric_limits<std::int32_t>::min(), 0, 2, -2, 0,
                                      std::numeric_limits<std::int32_t>::max(),
                                      std::numeric_limits<std::int32_t>::min(), 0, 0};
  BOOST_CHECK(conv<std::int32_t>(dtype::f32, in, dtype::i32) == i32);
  const std::vector<double> in64{0x1p63, -0x1p63, 0x1p63 - 1024, 9.3e18, -9.3e18, 0x1p64, 0x1p64 - 2048,
                                 -5.0, -0.5, 1e300, qnan, -1.9999, 2147483647.9, 2147483648.0, -2147483648.9};
  const std::vector<std::int64_t> i64{std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::min(),
                                      9223372036854774784, std::numeric_limits<std::int64_t>::max(),
                                      std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max(),
                                      std::numeric_limits<std::int64_t>::max(), -5, 0,
                                      std::numeric_limits<std::int64_t>::max(), 0, -1, 2147483647, 2147483648,
                                      -2147483648};
  BOOST_CHECK(conv<std::int64_t>(dtype::f64, in64, dtype::i64) == i64);
  const std::vector<std::uint64_t> u64{0x8000000000000000ULL, 0, 9223372036854774784ULL, 9300000000000000000ULL, 0,
                                       std::numeric_limits<std::uint64_t>::max(), 18446744073709549568ULL, 0, 0,
                                       std::numeric_limits<std::uint64_t>::max(), 0, 0, 2147483647, 2147483648, 0};
  BOOST_CHECK(conv<std::uint64_t>(dtype::f64, in64, dtype::u64) == u64);
  const std::vector<std::int32_t> i32b{std::numeric_limits<std::int32_t>::max(), std::numeric_limits<std::int32_t>::min(),
                                       std::numeric_limits<std::int32_t>::max(), std::numeric_limits<std::int32_t>::max(),
                                       std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max(),
                                       std::numeric_limits<std::int32_t>::max(), -5, 0,
                                       std::numeric_limits<std::int32_t>::max(), 0, -1, 2147483647,
                                       std::numeric_limits<std::int32_t>::max(), std::numeric_limits<std::int32_t>::min()};
  BOOST_CHECK(conv<std::int32_t>(dtype::f64, in64, dtype::i32) == i32b);
  // From the narrow formats.
  BOOST_CHECK_EQUAL(conv1<std::int32_t>(dtype::f16, std::uint16_t{0x7C00}, dtype::i32), std::numeric_limits<std::int32_t>::max());
  BOOST_CHECK_EQUAL(conv1<std::int32_t>(dtype::f16, std::uint16_t{0x7BFF}, dtype::i32), 65504);
  BOOST_CHECK_EQUAL(conv1<std::int16_t>(dtype::f16, std::uint16_t{0x7BFF}, dtype::i16), 32767);
  BOOST_CHECK_EQUAL(conv1<std::int32_t>(dtype::f16, std::uint16_t{0xBE00}, dtype::i32), -1);  // -1.5
  BOOST_CHECK_EQUAL(conv1<std::int32_t>(dtype::f16, std::uint16_t{0x7E00}, dtype::i32), 0);   // NaN
  BOOST_CHECK_EQUAL(conv1<std::uint8_t>(dtype::f8_e4m3, std::uint8_t{0x7E}, dtype::u8), 255);
  BOOST_CHECK_EQUAL(conv1<std::uint8_t>(dtype::f8_e4m3, std::uint8_t{0xFE}, dtype::u8), 0);
  BOOST_CHECK_EQUAL(conv1<std::int8_t>(dtype::f8_e4m3, std::uint8_t{0xFE}, dtype::i8), -128);
  BOOST_CHECK_EQUAL(conv1<std::int8_t>(dtype::f8_e4m3, std::uint8_t{0x7F}, dtype::i8), 0);  // NaN
  BOOST_CHECK_EQUAL(conv1<std::int64_t>(dtype::f8_e8m0, std::uint8_t{0xFE}, dtype::i64), std::numeric_limits<std::int64_t>::max());
  BOOST_CHECK_EQUAL(conv1<std::int64_t>(dtype::f8_e8m0, std::uint8_t{0x00}, dtype::i64), 0);
  BOOST_CHECK_EQUAL(conv1<std::int64_t>(dtype::f8_e8m0, std::uint8_t{0x85}, dtype::i64), 64);
  BOOST_CHECK_EQUAL(conv1<std::int64_t>(dtype::f8_e8m0, std::uint8_t{0xFF}, dtype::i64), 0);  // NaN
  BOOST_CHECK_EQUAL(conv1<std::int32_t>(dtype::bf16, std::uint16_t{0xC2F7}, dtype::i32), -123);  // -123.5
}

BOOST_AUTO_TEST_CASE(integer_to_integer_wraps) {
  BOOST_CHECK_EQUAL(conv1<std::uint8_t>(dtype::i32, 300, dtype::u8), 44);
  BOOST_CHECK_EQUAL(conv1<std::uint8_t>(dtype::i32, -1, dtype::u8), 255);
  BOOST_CHECK_EQUAL(conv1<std::int8_t>(dtype::i32, 200, dtype::i8), -56);
  BOOST_CHECK_EQUAL(conv1<std::int64_t>(dtype::u64, ~std::uint64_t{0}, dtype::i64), -1);
  BOOST_CHECK_EQUAL(conv1<std::uint64_t>(dtype::i64, std::int64_t{-1}, dtype::u64), ~std::uint64_t{0});
  BOOST_CHECK_EQUAL(conv1<std::int64_t>(dtype::u64, std::uint64_t{1} << 63, dtype::i64), std::numeric_limits<std::int64_t>::min());
  BOOST_CHECK_EQUAL(conv1<std::int8_t>(dtype::i16, std::int16_t{-32768}, dtype::i8), 0);
  BOOST_CHECK_EQUAL(conv1<std::int32_t>(dtype::u32, 0x80000000U, dtype::i32), std::numeric_limits<std::int32_t>::min());
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::i8, std::int8_t{-1}, dtype::u16), 65535);
  BOOST_CHECK_EQUAL(conv1<std::int8_t>(dtype::u8, std::uint8_t{255}, dtype::i8), -1);
  BOOST_CHECK_EQUAL(conv1<std::int64_t>(dtype::i8, std::int8_t{-100}, dtype::i64), -100);  // sign-extends
  BOOST_CHECK_EQUAL(conv1<std::uint32_t>(dtype::u64, 0x1'2345'6789ULL, dtype::u32), 0x2345'6789U);
}

BOOST_AUTO_TEST_CASE(nonzero_bools_cast_to_1_and_nonzero_values_nan_included_cast_to_true) {
  // From BOOL: any nonzero byte is 1.
  const std::vector<std::uint8_t> b{0, 1, 2, 255};
  BOOST_CHECK((conv<std::uint8_t>(dtype::boolean, b, dtype::u8) == std::vector<std::uint8_t>{0, 1, 1, 1}));
  BOOST_CHECK((conv<std::int64_t>(dtype::boolean, b, dtype::i64) == std::vector<std::int64_t>{0, 1, 1, 1}));
  BOOST_CHECK((conv<float>(dtype::boolean, b, dtype::f32) == std::vector<float>{0.0F, 1.0F, 1.0F, 1.0F}));
  BOOST_CHECK((conv<std::uint16_t>(dtype::boolean, b, dtype::f16) == std::vector<std::uint16_t>{0, 0x3C00, 0x3C00, 0x3C00}));
  BOOST_CHECK((conv<std::uint16_t>(dtype::boolean, b, dtype::bf16) == std::vector<std::uint16_t>{0, 0x3F80, 0x3F80, 0x3F80}));
  BOOST_CHECK((conv<std::uint8_t>(dtype::boolean, b, dtype::f8_e4m3) == std::vector<std::uint8_t>{0, 0x38, 0x38, 0x38}));
  BOOST_CHECK((conv<std::uint8_t>(dtype::boolean, b, dtype::f8_e8m0) == std::vector<std::uint8_t>{0xFF, 0x7F, 0x7F, 0x7F}));
  BOOST_CHECK((conv<std::complex<float>>(dtype::boolean, b, dtype::c64) ==
               std::vector<std::complex<float>>{{0, 0}, {1, 0}, {1, 0}, {1, 0}}));
  // To BOOL: nonzero is 1, NaN included, ±0 is 0.
  const std::vector<float> f{0.0F, -0.0F, std::numeric_limits<float>::quiet_NaN(), 0x1p-149F, -3.0F,
                             std::numeric_limits<float>::infinity()};
  BOOST_CHECK((conv<std::uint8_t>(dtype::f32, f, dtype::boolean) == std::vector<std::uint8_t>{0, 0, 1, 1, 1, 1}));
  const std::vector<double> d{0.0, -0.0, qnan, 5e-324, -3.0};
  BOOST_CHECK((conv<std::uint8_t>(dtype::f64, d, dtype::boolean) == std::vector<std::uint8_t>{0, 0, 1, 1, 1}));
  const std::vector<std::int32_t> i{0, 256, -1, 1};  // nonzero, not wrapped: 256 is 1
  BOOST_CHECK((conv<std::uint8_t>(dtype::i32, i, dtype::boolean) == std::vector<std::uint8_t>{0, 1, 1, 1}));
  const std::vector<std::uint8_t> e43{0x00, 0x80, 0x7F, 0x01};
  BOOST_CHECK((conv<std::uint8_t>(dtype::f8_e4m3, e43, dtype::boolean) == std::vector<std::uint8_t>{0, 0, 1, 1}));
  const std::vector<std::uint8_t> e80{0x00, 0xFF};
  BOOST_CHECK((conv<std::uint8_t>(dtype::f8_e8m0, e80, dtype::boolean) == std::vector<std::uint8_t>{1, 1}));
  const std::vector<std::uint16_t> h{0x0000, 0x8000, 0x0001, 0x7C00};
  BOOST_CHECK((conv<std::uint8_t>(dtype::f16, h, dtype::boolean) == std::vector<std::uint8_t>{0, 0, 1, 1}));
}

BOOST_AUTO_TEST_CASE(c64_casts_to_reals_by_its_real_part_and_reals_to_c64_with_imaginary_zero) {
  const std::vector<std::complex<float>> c{{1.5F, -2.0F}, {-7.75F, 3.0F}, {0.0F, 5.0F}, {1e10F, 0.0F}};
  BOOST_CHECK((conv<float>(dtype::c64, c, dtype::f32) == std::vector<float>{1.5F, -7.75F, 0.0F, 1e10F}));
  BOOST_CHECK((conv<double>(dtype::c64, c, dtype::f64) == std::vector<double>{1.5, -7.75, 0.0, 1e10}));
  BOOST_CHECK((conv<std::int32_t>(dtype::c64, c, dtype::i32) ==
               std::vector<std::int32_t>{1, -7, 0, std::numeric_limits<std::int32_t>::max()}));
  BOOST_CHECK((conv<std::uint8_t>(dtype::c64, c, dtype::boolean) == std::vector<std::uint8_t>{1, 1, 0, 1}));
  BOOST_CHECK((conv<std::uint16_t>(dtype::c64, c, dtype::f16) == std::vector<std::uint16_t>{0x3E00, 0xC7C0, 0x0000, 0x7C00}));
  // Real to C64: imaginary +0; F64 rounded to F32.
  const std::vector<double> d{1.0 + 0x1p-24 + 0x1p-50, -2.5, -0.0};
  const auto from_d = conv<std::complex<float>>(dtype::f64, d, dtype::c64);
  BOOST_CHECK_EQUAL(bits(from_d[0].real()), 0x3F800001U);
  BOOST_CHECK_EQUAL(from_d[1].real(), -2.5F);
  BOOST_CHECK_EQUAL(bits(from_d[2].real()), 0x80000000U);
  for (const auto& z : from_d) BOOST_CHECK_EQUAL(bits(z.imag()), 0U);
  const auto from_i = conv<std::complex<float>>(dtype::i16, std::vector<std::int16_t>{-3, 7}, dtype::c64);
  BOOST_CHECK((from_i == std::vector<std::complex<float>>{{-3.0F, 0.0F}, {7.0F, 0.0F}}));
  // C64 to C64 is the identity, imaginary parts included.
  const auto same = ckpt::cast(ckpt::tensor::copy_of(dtype::c64, {4}, std::as_bytes(std::span(c))), dtype::c64);
  BOOST_CHECK(std::equal(same.bytes().begin(), same.bytes().end(), std::as_bytes(std::span(c)).begin()));
}

// ================================================================ the API over all dtypes

BOOST_AUTO_TEST_CASE(every_pair_converts_or_throws) {
  for (std::size_t i = 0; i < ckpt::detail::dtype_count; ++i) {
    for (std::size_t j = 0; j < ckpt::detail::dtype_count; ++j) {
      const auto from = static_cast<dtype>(i);
      const auto to = static_cast<dtype>(j);
      const ckpt::dims shape{2, 4};
      std::vector<std::byte> data(ckpt::detail::nbytes_of(from, 8));
      for (std::size_t k = 0; k < data.size(); ++k) data[k] = static_cast<std::byte>(k * 37 + 5);
      const auto x = ckpt::tensor::copy_of(from, shape, data);
      const bool castable = from == to || (!ckpt::detail::is_sub_byte(from) && !ckpt::detail::is_sub_byte(to));
      BOOST_CHECK_EQUAL(ckpt::detail::can_cast(from, to), castable);
      if (castable) {
        const auto y = ckpt::cast(x, to);
        BOOST_CHECK(y.dtype() == to);
        BOOST_CHECK(std::ranges::equal(y.shape(), shape));
        BOOST_CHECK_EQUAL(y.nbytes(), ckpt::detail::nbytes_of(to, 8));
        if (from == to) BOOST_CHECK(y.bytes().data() == x.bytes().data());  // x itself
      } else {
        const std::string expected = "ckpt: cannot cast " + std::string(ckpt::to_string(from)) +
                                     " to " + std::string(ckpt::to_string(to)) +
                                     ": F6_E2M3, F6_E3M2 and F4 are raw bytes only";
        BOOST_CHECK_EXCEPTION((void)ckpt::cast(x, to), std::invalid_argument,
                              [&](const std::invalid_argument& e) { return message_is(e, expected); });
        std::vector<std::byte> out(64);
        BOOST_CHECK_EXCEPTION(ckpt::detail::convert(from, data, to, out, 8), std::invalid_argument,
                              [&](const std::invalid_argument& e) { return message_is(e, expected); });
      }
    }
  }
  const auto f32 = ckpt::tensor::copy_of(dtype::f32, {1}, std::vector<std::byte>(4));
  BOOST_CHECK_EXCEPTION((void)ckpt::cast(f32, dtype::f4), std::invalid_argument, [](const std::invalid_argument& e) {
    return message_is(e, "ckpt: cannot cast F32 to F4: F6_E2M3, F6_E3M2 and F4 are raw bytes only");
  });
  const auto f6 = ckpt::tensor::copy_of(dtype::f6_e2m3, {4}, std::vector<std::byte>(3));
  BOOST_CHECK_EXCEPTION((void)ckpt::cast(f6, dtype::f8_e4m3), std::invalid_argument, [](const std::invalid_argument& e) {
    return message_is(e, "ckpt: cannot cast F6_E2M3 to F8_E4M3: F6_E2M3, F6_E3M2 and F4 are raw bytes only");
  });
}

BOOST_AUTO_TEST_CASE(cast_keeps_shape_and_converts_values) {
  const std::vector<float> v{1.0F, -2.5F, 3.25F, 65504.0F, 0.0F, -0.0F};
  const auto x = ckpt::tensor::copy_of(dtype::f32, {3, 2}, std::as_bytes(std::span(v)));
  const auto h = ckpt::cast(x, dtype::f16);
  BOOST_CHECK(h.dtype() == dtype::f16);
  BOOST_CHECK((std::vector<std::int64_t>(h.shape().begin(), h.shape().end()) == std::vector<std::int64_t>{3, 2}));
  BOOST_CHECK((typed<std::uint16_t>({h.bytes().begin(), h.bytes().end()}) ==
               std::vector<std::uint16_t>{0x3C00, 0xC100, 0x4280, 0x7BFF, 0x0000, 0x8000}));
  const auto back = ckpt::cast(h, dtype::f32);
  BOOST_CHECK(back == x);
  const auto d = ckpt::cast(x, dtype::f64);
  const auto ds = d.as<double>();
  BOOST_CHECK((std::vector<double>(ds.begin(), ds.end()) == std::vector<double>{1.0, -2.5, 3.25, 65504.0, 0.0, -0.0}));
  // A scalar and an empty tensor.
  const std::vector<std::int32_t> minus7{-7};
  const auto s = ckpt::cast(ckpt::tensor::copy_of(dtype::i32, {}, std::as_bytes(std::span(minus7))), dtype::f32);
  BOOST_CHECK_EQUAL(s.rank(), 0U);
  BOOST_CHECK_EQUAL(s.as<float>()[0], -7.0F);
  const auto e = ckpt::cast(ckpt::tensor::copy_of(dtype::f64, {0, 3}, {}), dtype::bf16);
  BOOST_CHECK(e.dtype() == dtype::bf16);
  BOOST_CHECK_EQUAL(e.numel(), 0);
  BOOST_CHECK_EQUAL(e.nbytes(), 0U);
}

BOOST_AUTO_TEST_CASE(convert_handles_unaligned_buffers_and_refuses_short_ones_writing_nothing) {
  // Misaligned input and output.
  std::vector<std::byte> in(1 + 3 * 8);
  const std::vector<double> v{1.5, -0.25, 1e300};
  std::memcpy(in.data() + 1, v.data(), 24);
  std::vector<std::byte> out(3 + 3 * 4 + 5, std::byte{0xAA});
  ckpt::detail::convert(dtype::f64, std::span(in).subspan(1), dtype::f32, std::span(out).subspan(3), 3);
  std::vector<float> got(3);
  std::memcpy(got.data(), out.data() + 3, 12);
  BOOST_CHECK((got == std::vector<float>{1.5F, -0.25F, std::numeric_limits<float>::infinity()}));
  BOOST_CHECK(out[2] == std::byte{0xAA});   // nothing before
  BOOST_CHECK(out[15] == std::byte{0xAA});  // nor after
  // Short spans throw and write nothing.
  std::vector<std::byte> small(11, std::byte{0xAA});
  BOOST_CHECK_EXCEPTION(ckpt::detail::convert(dtype::f64, std::span(in).subspan(1), dtype::f32, small, 3),
                        std::invalid_argument,
                        [](const std::invalid_argument& e) {
                          return message_is(e, "ckpt: cannot convert 3 F32 elements: the output holds 11 bytes, 12 are needed");
                        });
  BOOST_CHECK(std::all_of(small.begin(), small.end(), [](std::byte b) { return b == std::byte{0xAA}; }));
  BOOST_CHECK_EXCEPTION(ckpt::detail::convert(dtype::f64, std::span(in).subspan(2), dtype::f32, out, 3),
                        std::invalid_argument,
                        [](const std::invalid_argument& e) {
                          return message_is(e, "ckpt: cannot convert 3 F64 elements: the input holds 23 bytes, 24 are needed");
                        });
  // Same dtype: a copy; sub-byte only in whole bytes.
  std::vector<std::byte> f4(2, std::byte{0x5A});
  std::vector<std::byte> f4out(2);
  ckpt::detail::convert(dtype::f4, f4, dtype::f4, f4out, 4);
  BOOST_CHECK(f4out == f4);
  BOOST_CHECK_THROW(ckpt::detail::convert(dtype::f4, f4, dtype::f4, f4out, 3), std::invalid_argument);
  // Zero elements of empty spans.
  ckpt::detail::convert(dtype::f32, {}, dtype::f16, {}, 0);
  BOOST_CHECK(!ckpt::detail::can_cast(static_cast<dtype>(200), dtype::f32));
  BOOST_CHECK_THROW(ckpt::detail::convert(static_cast<dtype>(200), in, dtype::f32, out, 1), std::invalid_argument);
}

// ================================================================ the shared fixtures

BOOST_AUTO_TEST_CASE(the_fixtures_f16_bf16_and_special_values_decode_and_encode_as_recorded) {
  // fixtures/valid/dtype_F16.json, tensor "x": hex and decoded values.
  const auto f16x = typed<std::uint16_t>(hex("003d40400042c04380c2c0c000be00b9"));
  const std::vector<float> f16v{1.25F, 2.125F, 3.0F, 3.875F, -3.25F, -2.375F, -1.5F, -0.625F};
  BOOST_CHECK(conv<float>(dtype::f16, f16x, dtype::f32) == f16v);
  BOOST_CHECK(conv<std::uint16_t>(dtype::f32, f16v, dtype::f16) == f16x);
  // fixtures/valid/dtype_BF16.json, tensor "x".
  const auto bf16x = typed<std::uint16_t>(hex("d03f2040584070c038c000c090bf80be"));
  const std::vector<float> bf16v{1.625F, 2.5F, 3.375F, -3.75F, -2.875F, -2.0F, -1.125F, -0.25F};
  BOOST_CHECK(conv<float>(dtype::bf16, bf16x, dtype::f32) == bf16v);
  BOOST_CHECK(conv<std::uint16_t>(dtype::f32, bf16v, dtype::bf16) == bf16x);
  // fixtures/valid/special_values.json, tensor "f16": nan, inf, -inf, -0, 0, 2^-24, 65504,
  // -65504, 2^-14, 1, -1.5, 0.333251953125.
  const auto f16s = typed<std::uint16_t>(hex("007e007c00fc008000000100ff7bfffb0004003c00be5535"));
  const std::vector<double> f16sv{qnan, inf, -inf, -0.0, 0.0, 5.960464477539063e-08, 65504.0, -65504.0,
                                  6.103515625e-05, 1.0, -1.5, 0.333251953125};
  const auto f16d = conv<double>(dtype::f16, f16s, dtype::f64);
  BOOST_CHECK(std::isnan(f16d[0]));
  for (std::size_t i = 1; i < f16d.size(); ++i) BOOST_CHECK_EQUAL(bits(f16d[i]), bits(f16sv[i]));
  BOOST_CHECK(conv<std::uint16_t>(dtype::f64, f16sv, dtype::f16) == f16s);
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::f64, 1.0 / 3.0, dtype::f16), 0x3555);
  // Tensor "bf16": nan, inf, -inf, -0, 0, 2^-133, max, -max, 2^-126, 1, -1.5, 3.140625.
  const auto bf16s = typed<std::uint16_t>(hex("c07f807f80ff0080000001007f7f7fff8000803fc0bf4940"));
  const std::vector<double> bf16sv{qnan, inf, -inf, -0.0, 0.0, 9.183549615799121e-41, 3.3895313892515355e+38,
                                   -3.3895313892515355e+38, 1.1754943508222875e-38, 1.0, -1.5, 3.140625};
  const auto bf16d = conv<double>(dtype::bf16, bf16s, dtype::f64);
  BOOST_CHECK(std::isnan(bf16d[0]));
  for (std::size_t i = 1; i < bf16d.size(); ++i) BOOST_CHECK_EQUAL(bits(bf16d[i]), bits(bf16sv[i]));
  BOOST_CHECK(conv<std::uint16_t>(dtype::f64, bf16sv, dtype::bf16) == bf16s);
  // Tensors "f64" and "f32": the F64 specials narrowed to F32. 1e-8 narrows to the F32
  // fixture's 9.99999993922529e-09 (0x322BCC77), pi to 0x40490FDB.
  const auto f64s = typed<double>(hex("000000000000f87f000000000000f07f000000000000f0ff000000000000008000000000000000000100000000000000ffffffffffffef7fffffffffffffefff0000000000001000000000000000f03f000000000000f8bf182d4454fb2109409c7500883ce4377e"));
  const auto narrowed = conv<std::uint32_t>(dtype::f64, f64s, dtype::f32);
  const std::vector<std::uint32_t> expected{0x7FC00000U, 0x7F800000U, 0xFF800000U, 0x80000000U, 0, 0, 0x7F800000U,
                                            0xFF800000U, 0, 0x3F800000U, 0xBFC00000U, 0x40490FDBU, 0x7F800000U};
  BOOST_CHECK(narrowed == expected);
  BOOST_CHECK_EQUAL(conv1<std::uint32_t>(dtype::f64, 1e-8, dtype::f32), 0x322BCC77U);
  const auto f32s = typed<float>(hex("0000c07f0000807f000080ff000000800000000001000000ffff7f7fffff7fff000080000000803f0000c0bf00e07f4777cc2b32"));
  const auto widened = conv<double>(dtype::f32, f32s, dtype::f64);
  BOOST_CHECK_EQUAL(widened[5], 1.401298464324817e-45);
  BOOST_CHECK_EQUAL(widened[6], 3.4028234663852886e38);
  BOOST_CHECK_EQUAL(widened[12], 9.99999993922529e-09);
  BOOST_CHECK_EQUAL(conv1<std::uint16_t>(dtype::f32, f32s[11], dtype::f16), 0x7BFF);  // 65504
}

BOOST_AUTO_TEST_CASE(fixture_f8_bytes_round_trip) {
  // fixtures/valid/all_dtypes_f8.json (raw byte patterns, no decoded values) and the
  // dtype_F8_*.json "x" tensors: every byte survives F8 -> F32 -> F8.
  const std::vector<std::pair<dtype, std::string>> cases{
      {dtype::f8_e8m0, "a5ee3780c9125ba4ed367fc8"},
      {dtype::f8_e4m3, "8bd41d66aff8418ad31c65ae"},
      {dtype::f8_e5m2, "98e12a73bc054e97e02972bb"},
      {dtype::f8_e4m3, "6db6ff4891da236c"},
      {dtype::f8_e8m0, "7ac30c559ee73079"},
      {dtype::f8_e4m3fnuz, "87d01962abf43d86"},
  };
  for (const auto& [type, h] : cases) {
    const auto raw = hex(h);
    const auto x = ckpt::tensor::copy_of(type, {static_cast<std::int64_t>(raw.size())}, raw);
    BOOST_CHECK(ckpt::cast(ckpt::cast(x, dtype::f32), type) == x);
  }
  // A few decoded by hand from the definitions: E4M3 0x6d = 2^(13-7) * 1.625 = 104,
  // 0xff = NaN; E8M0 0x7a = 2^-5; E4M3FNUZ 0x87 = -(7 * 2^-10).
  BOOST_CHECK_EQUAL(conv1<float>(dtype::f8_e4m3, std::uint8_t{0x6d}, dtype::f32), 104.0F);
  BOOST_CHECK(std::isnan(conv1<float>(dtype::f8_e4m3, std::uint8_t{0xff}, dtype::f32)));
  BOOST_CHECK_EQUAL(conv1<float>(dtype::f8_e8m0, std::uint8_t{0x7a}, dtype::f32), 0x1p-5F);
  BOOST_CHECK_EQUAL(conv1<float>(dtype::f8_e4m3fnuz, std::uint8_t{0x87}, dtype::f32), -7 * 0x1p-10F);
}

BOOST_AUTO_TEST_SUITE_END()  // test_cast
