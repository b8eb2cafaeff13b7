// Element-wise dtype conversion. See include/ckpt/adapt.hpp (ckpt::cast) for the rules.
//
// Design: every whole-byte dtype has a codec with `get` (load one element from bytes) and
// `put` (store one value as an element). `get` yields the source's exact value as a native
// integer (integer dtypes, BOOL as 0/1), a float (F32, C64's real part) or a double (F64, F16,
// BF16, F8: all exact in double, NaN payloads kept in the leading mantissa bits). Each `put`
// has one rule per kind of value, so the (from, to) pair is resolved once, at compile time,
// into a plain loop; `convert` picks the loop from a 19 x 19 table of function pointers.
//
// Rounding to a narrow float goes through one generic encoder working on an exact value
// m * 2^e (m up to 64 bits), so F64 and 64-bit integers round once, directly to the target.
// When an F32 or F64 value is normal in the target, a fast path rebiases its exponent in
// place and rounds the mantissa with integer arithmetic (same result, checked against the
// generic encoder for all 2^32 floats). Hardware conversions are used only where they are
// exact or correctly rounded whatever the flush-to-zero / denormals-are-zero modes: integer
// -> F32/F64, normal F32 -> F64, and F64 -> F32 when the result is normal.

#include "cast.hpp"

#include <ckpt/detail/cast.hpp>
#include <ckpt/detail/pages.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace ckpt {
namespace {

// ---------------------------------------------------------------- raw loads and stores

template <class T>
[[nodiscard]] inline T load(const std::byte* p) noexcept {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class T>
inline void store(std::byte* p, T v) noexcept {
  std::memcpy(p, &v, sizeof v);
}

// ---------------------------------------------------------------- binary64 constants

constexpr std::uint64_t f64_sign = std::uint64_t{1} << 63;
constexpr std::uint64_t f64_exp_mask = 0x7FF0'0000'0000'0000;  // also +inf
constexpr std::uint64_t f64_mant_mask = (std::uint64_t{1} << 52) - 1;
constexpr std::uint64_t f64_quiet_nan = 0x7FF8'0000'0000'0000;
constexpr std::uint64_t f64_min_normal_f32 = 0x3810'0000'0000'0000;  // 2^-126
constexpr std::uint64_t f64_max_f32 = 0x47EF'FFFF'E000'0000;         // FLT_MAX
constexpr std::uint64_t half64 = std::uint64_t{1} << 63;

// ---------------------------------------------------------------- small binary float formats

/// How a format spells its special values.
enum class style {
  ieee,  ///< exponent all ones: infinity (mantissa 0) or NaN (payload = mantissa)
  fn,    ///< no infinities; NaN is S.1...1.1...1 only (OCP E4M3FN)
  fnuz,  ///< no infinities, no -0; NaN is the sign bit alone (0x80)
};

/// A sign + exponent + mantissa binary float format with subnormals.
template <int E, int M, int Bias, style S, class Bits>
struct float_format {
  using bits = Bits;
  static constexpr int mbits = M;
  static constexpr int bias = Bias;
  static constexpr style kind = S;
  static constexpr std::uint64_t sign = std::uint64_t{1} << (E + M);
  static constexpr std::uint64_t mant_mask = (std::uint64_t{1} << M) - 1;
  static constexpr std::uint64_t field_max = (std::uint64_t{1} << E) - 1;  // all-ones exponent
  static constexpr std::uint64_t inf_code = field_max << M;                 // style::ieee
  static constexpr std::uint64_t fn_nan_code = (field_max << M) | mant_mask;  // style::fn
  /// The code of the largest finite value.
  static constexpr std::uint64_t max_code =
      S == style::ieee ? ((field_max - 1) << M) | mant_mask
      : S == style::fn ? (field_max << M) | (mant_mask - 1)
                       : (field_max << M) | mant_mask;
  static constexpr int emin = 1 - Bias;  // exponent of the smallest normal value
  static constexpr int emax = static_cast<int>(max_code >> M) - Bias;  // of the largest finite
};

using f16_format = float_format<5, 10, 15, style::ieee, std::uint16_t>;
using bf16_format = float_format<8, 7, 127, style::ieee, std::uint16_t>;
using f32_format = float_format<8, 23, 127, style::ieee, std::uint32_t>;
using e4m3_format = float_format<4, 3, 7, style::fn, std::uint8_t>;
using e5m2_format = float_format<5, 2, 15, style::ieee, std::uint8_t>;
using e4m3fnuz_format = float_format<4, 3, 8, style::fnuz, std::uint8_t>;
using e5m2fnuz_format = float_format<5, 2, 16, style::fnuz, std::uint8_t>;

/// The exact value of `code` in format F, as a double (NaN payload in the leading bits).
template <class F>
[[nodiscard]] constexpr double decode(std::uint64_t code) noexcept {
  if constexpr (F::kind == style::fnuz) {
    if (code == F::sign) return std::bit_cast<double>(f64_quiet_nan);
  }
  const std::uint64_t sign = (code & F::sign) != 0 ? f64_sign : 0;
  const std::uint64_t mag = code & (F::sign - 1);
  const std::uint64_t field = mag >> F::mbits;
  const std::uint64_t mant = mag & F::mant_mask;
  if constexpr (F::kind == style::fn) {
    if (mag == F::fn_nan_code) return std::bit_cast<double>(sign | f64_quiet_nan);
  }
  if constexpr (F::kind == style::ieee) {
    if (field == F::field_max) {
      return std::bit_cast<double>(sign | f64_exp_mask | (mant << (52 - F::mbits)));
    }
  }
  if (field == 0) {
    if (mant == 0) return std::bit_cast<double>(sign);
    // Subnormal: mant * 2^(emin - M), a normal double.
    const int msb = 63 - std::countl_zero(mant);
    const auto exp = static_cast<std::uint64_t>(msb + F::emin - F::mbits + 1023);
    return std::bit_cast<double>(sign | (exp << 52) | ((mant << (52 - msb)) & f64_mant_mask));
  }
  const auto exp = static_cast<std::uint64_t>(static_cast<int>(field) - F::bias + 1023);
  return std::bit_cast<double>(sign | (exp << 52) | (mant << (52 - F::mbits)));
}

template <class F>
[[nodiscard]] constexpr std::uint64_t with_sign(bool negative, std::uint64_t code) noexcept {
  if constexpr (F::kind == style::fnuz) {
    return negative && code != 0 ? code | F::sign : code;  // no -0
  } else {
    return negative ? code | F::sign : code;
  }
}

/// What an out-of-range value or an infinity becomes: infinity, or NaN without infinities.
template <class F>
[[nodiscard]] constexpr std::uint64_t overflow(bool negative) noexcept {
  if constexpr (F::kind == style::ieee) return with_sign<F>(negative, F::inf_code);
  else if constexpr (F::kind == style::fn) return with_sign<F>(negative, F::fn_nan_code);
  else return F::sign;
}

/// A NaN whose binary64 magnitude bits are `mag`: payload's leading bits, or the quiet bit.
template <class F>
[[nodiscard]] constexpr std::uint64_t nan_of(bool negative, std::uint64_t mag) noexcept {
  if constexpr (F::kind == style::ieee) {
    std::uint64_t payload = (mag & f64_mant_mask) >> (52 - F::mbits);
    if (payload == 0) payload = std::uint64_t{1} << (F::mbits - 1);
    return with_sign<F>(negative, F::inf_code | payload);
  } else if constexpr (F::kind == style::fn) {
    return with_sign<F>(negative, F::fn_nan_code);
  } else {
    return F::sign;
  }
}

/// The code of (-1)^negative * m * 2^e in format F, rounded to nearest, ties to even.
/// Requires m != 0. Branches only on rare cases (overflow, results far below the smallest
/// subnormal), so that random data does not defeat branch prediction.
template <class F>
[[nodiscard]] constexpr std::uint64_t encode_finite(bool negative, std::uint64_t m,
                                                    int e) noexcept {
  const int lz = std::countl_zero(m);
  m <<= lz;                     // leading bit at bit 63
  const int top = e - lz + 63;  // exponent of the leading bit
  if (top > F::emax) return overflow<F>(negative);
  // Exponent of the leading bit position the result keeps (emin for subnormals); the
  // result's unit in the last place is 2^(scale - M), i.e. bit `shift` of m.
  const int scale = top > F::emin ? top : F::emin;
  const int shift = scale - F::mbits - (top - 63);  // >= 63 - M > 0
  std::uint64_t r = 0;
  if (shift < 64) [[likely]] {
    r = m >> shift;
    const std::uint64_t rest = m << (64 - shift);  // the dropped bits, left-aligned
    r += static_cast<std::uint64_t>((rest > half64) | ((rest == half64) & ((r & 1) != 0)));
  } else if (shift == 64) {
    r = m > half64 ? 1 : 0;  // a tie goes to the even 0
  }
  // Normal: r is 2^M + fraction and the field is top + bias = scale - emin + 1. Subnormal: r
  // is the fraction, field 0. A carry out of r moves into the exponent field, as it should.
  const std::uint64_t code = (static_cast<std::uint64_t>(scale - F::emin) << F::mbits) + r;
  if (code > F::max_code) return overflow<F>(negative);
  return with_sign<F>(negative, code);
}

/// Fast path of the encoders, for a finite source value that is normal in F: `mag` is the
/// magnitude bits of a binary float with SM mantissa bits and bias SB (F32 or F64). The
/// exponent is rebiased in place and the mantissa rounded to M bits, ties to even; a carry
/// moves into the exponent, and past the largest finite code it is an overflow.
template <class F, int SM, int SB, class Bits>
[[nodiscard]] constexpr std::uint64_t encode_normal(bool negative, Bits mag) noexcept {
  constexpr int drop = SM - F::mbits;
  static_assert(drop > 0 && SB >= F::bias);
  const Bits t = mag - (static_cast<Bits>(SB - F::bias) << SM);
  const Bits code = (t + ((Bits{1} << (drop - 1)) - 1) + ((t >> drop) & 1)) >> drop;
  if (code > F::max_code) return overflow<F>(negative);
  return with_sign<F>(negative, code);
}

/// The code of the double `d` in format F.
template <class F>
[[nodiscard]] constexpr std::uint64_t encode(double d) noexcept {
  const auto b = std::bit_cast<std::uint64_t>(d);
  const bool negative = (b & f64_sign) != 0;
  const std::uint64_t mag = b & ~f64_sign;
  const int top = static_cast<int>(mag >> 52) - 1023;
  if (top >= F::emin && top <= F::emax) [[likely]] return encode_normal<F, 52, 1023>(negative, mag);
  if (mag >= f64_exp_mask) return mag == f64_exp_mask ? overflow<F>(negative) : nan_of<F>(negative, mag);
  if (mag == 0) return with_sign<F>(negative, 0);
  const std::uint64_t field = mag >> 52;
  const std::uint64_t mant = mag & f64_mant_mask;
  if (field == 0) return encode_finite<F>(negative, mant, -1074);
  return encode_finite<F>(negative, mant | (std::uint64_t{1} << 52), static_cast<int>(field) - 1075);
}

/// The code of the integer `v` in format F (integer zero is +0).
template <class F, class I>
[[nodiscard]] constexpr std::uint64_t encode_integer(I v) noexcept {
  if (v == 0) return 0;
  if constexpr (std::is_signed_v<I>) {
    if (v < 0) return encode_finite<F>(true, std::uint64_t{0} - static_cast<std::uint64_t>(v), 0);
  }
  return encode_finite<F>(false, static_cast<std::uint64_t>(v), 0);
}

// ---------------------------------------------------------------- F8_E8M0

constexpr std::uint8_t e8m0_nan = 0xFF;

[[nodiscard]] constexpr double e8m0_decode(std::uint8_t code) noexcept {
  if (code == e8m0_nan) return std::bit_cast<double>(f64_quiet_nan);
  return std::bit_cast<double>(static_cast<std::uint64_t>(code - 127 + 1023) << 52);
}

/// The code of m * 2^e (m != 0, positive): 2^k with k rounded to nearest, ties to the even
/// code; below 2^-127 the nearest value is 2^-127; above 2^127, NaN.
[[nodiscard]] constexpr std::uint8_t e8m0_encode_finite(std::uint64_t m, int e) noexcept {
  const int lz = std::countl_zero(m);
  m <<= lz;
  int code = e - lz + 63 + 127;
  const std::uint64_t rest = m << 1;  // the fraction after the leading bit
  if (rest > half64 || (rest == half64 && (code & 1) != 0)) ++code;
  if (code < 0) return 0;
  if (code > 254) return e8m0_nan;
  return static_cast<std::uint8_t>(code);
}

[[nodiscard]] constexpr std::uint8_t e8m0_encode(double d) noexcept {
  const auto b = std::bit_cast<std::uint64_t>(d);
  // Negative values (-0 included), zero, infinity and NaN have no E8M0 code but NaN.
  if ((b & f64_sign) != 0 || b == 0 || b >= f64_exp_mask) return e8m0_nan;
  const std::uint64_t field = b >> 52;
  const std::uint64_t mant = b & f64_mant_mask;
  if (field == 0) return e8m0_encode_finite(mant, -1074);
  return e8m0_encode_finite(mant | (std::uint64_t{1} << 52), static_cast<int>(field) - 1075);
}

template <class I>
[[nodiscard]] constexpr std::uint8_t e8m0_encode_integer(I v) noexcept {
  if (v <= 0) return e8m0_nan;
  return e8m0_encode_finite(static_cast<std::uint64_t>(v), 0);
}

// ---------------------------------------------------------------- F32 <-> F64, BF16

/// The exact double of `f`, NaN payload and subnormals kept whatever the FP modes.
[[nodiscard]] inline double widen(float f) noexcept {
  const auto b = std::bit_cast<std::uint32_t>(f);
  if (((b >> 23) & 0xFF) - 1U < 254U) return static_cast<double>(f);  // normal: exact
  return decode<f32_format>(b);
}

/// The code of the float `f` in format F: like encode<F>(widen(f)), faster when the value
/// is normal in F.
template <class F>
[[nodiscard]] inline std::uint64_t encode(float f) noexcept {
  const auto b = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t mag = b & 0x7FFF'FFFFU;
  const int top = static_cast<int>(mag >> 23) - 127;
  if (top >= F::emin && top <= F::emax) [[likely]] return encode_normal<F, 23, 127>((b >> 31) != 0, mag);
  return encode<F>(widen(f));
}

/// The F32 bits of `d`, rounded to nearest, ties to even.
[[nodiscard]] inline std::uint32_t narrow_to_f32(double d) noexcept {
  const std::uint64_t mag = std::bit_cast<std::uint64_t>(d) & ~f64_sign;
  if (mag >= f64_min_normal_f32 && mag <= f64_max_f32) {
    // A normal result: the hardware rounds correctly, unaffected by flush-to-zero.
    return std::bit_cast<std::uint32_t>(static_cast<float>(d));
  }
  return static_cast<std::uint32_t>(encode<f32_format>(d));
}

/// The BF16 bits of the F32 bits `b` (BF16 is F32 with 16 fewer mantissa bits).
[[nodiscard]] inline std::uint16_t bf16_of_f32(std::uint32_t b) noexcept {
  if ((b & 0x7FFF'FFFFU) > 0x7F80'0000U) {  // NaN: keep the payload's leading bits
    std::uint32_t r = b >> 16;
    if ((r & 0x7FU) == 0) r |= 0x40U;
    return static_cast<std::uint16_t>(r);
  }
  return static_cast<std::uint16_t>((b + 0x7FFFU + ((b >> 16) & 1U)) >> 16);
}

// ---------------------------------------------------------------- to integers and BOOL

/// 2^n as a double, for bounds.
[[nodiscard]] constexpr double pow2(int n) noexcept {
  double r = 1.0;
  for (int i = 0; i < n; ++i) r *= 2.0;
  return r;
}

/// `d` truncated toward zero, saturated to T's range; NaN gives 0.
template <class T>
[[nodiscard]] inline T saturate(double d) noexcept {
  constexpr double hi = pow2(std::numeric_limits<T>::digits);  // max + 1
  if (d != d) return T{0};
  if (d >= hi) return std::numeric_limits<T>::max();
  if constexpr (std::is_signed_v<T>) {
    if (d < -hi) return std::numeric_limits<T>::min();
  } else {
    if (d < 0.0) return T{0};
  }
  return static_cast<T>(d);
}

template <class T, class V>
[[nodiscard]] inline T to_integer(V v) noexcept {
  if constexpr (std::is_integral_v<V>) return static_cast<T>(v);  // wraps (C++20)
  else return saturate<T>(static_cast<double>(v));
}

template <class V>
[[nodiscard]] inline bool nonzero(V v) noexcept {
  if constexpr (std::is_integral_v<V>) return v != 0;
  else if constexpr (std::is_same_v<V, float>) return (std::bit_cast<std::uint32_t>(v) << 1) != 0;
  else return (std::bit_cast<std::uint64_t>(v) << 1) != 0;
}

// ---------------------------------------------------------------- codecs, one per dtype

struct bool_codec {
  static constexpr std::size_t size = 1;
  [[nodiscard]] static std::uint8_t get(const std::byte* p) noexcept {
    return *p != std::byte{0} ? 1 : 0;
  }
  template <class V>
  static void put(std::byte* p, V v) noexcept {
    store<std::uint8_t>(p, nonzero(v) ? 1 : 0);
  }
};

/// A codec whose elements are stored as a T: its size and how it reads one.
template <class T>
struct stored_as {
  static constexpr std::size_t size = sizeof(T);
  [[nodiscard]] static T get(const std::byte* p) noexcept { return load<T>(p); }
};

template <class T>
struct int_codec : stored_as<T> {
  template <class V>
  static void put(std::byte* p, V v) noexcept {
    store<T>(p, to_integer<T>(v));
  }
};

/// F32 and F64: integers converted, the same type stored, a float widened exactly, a double
/// narrowed to F32 with one rounding.
template <class F>
struct ieee_codec : stored_as<F> {
  template <class V>
  static void put(std::byte* p, V v) noexcept {
    static_assert(std::is_integral_v<V> || std::is_same_v<V, float> || std::is_same_v<V, double>);
    if constexpr (std::is_integral_v<V>) store<F>(p, static_cast<F>(v));
    else if constexpr (std::is_same_v<V, F>) store<F>(p, v);
    else if constexpr (std::is_same_v<F, double>) store<double>(p, widen(v));
    else store<std::uint32_t>(p, narrow_to_f32(v));
  }
};
using f32_codec = ieee_codec<float>;
using f64_codec = ieee_codec<double>;

struct c64_codec {
  static constexpr std::size_t size = 8;
  [[nodiscard]] static float get(const std::byte* p) noexcept { return load<float>(p); }
  template <class V>
  static void put(std::byte* p, V v) noexcept {
    f32_codec::put(p, v);
    store<float>(p + 4, 0.0F);
  }
};

/// F16, BF16 and the signed F8 formats.
template <class F>
struct small_codec {
  using bits = typename F::bits;
  static constexpr std::size_t size = sizeof(bits);
  [[nodiscard]] static double get(const std::byte* p) noexcept { return decode<F>(load<bits>(p)); }
  template <class V>
  static void put(std::byte* p, V v) noexcept {
    std::uint64_t code = 0;
    if constexpr (std::is_integral_v<V>) code = encode_integer<F>(v);
    else code = encode<F>(v);  // float or double
    store<bits>(p, static_cast<bits>(code));
  }
};

struct bf16_codec : small_codec<bf16_format> {
  template <class V>
  static void put(std::byte* p, V v) noexcept {
    if constexpr (std::is_same_v<V, float>) store<std::uint16_t>(p, bf16_of_f32(std::bit_cast<std::uint32_t>(v)));
    else small_codec<bf16_format>::put(p, v);
  }
};

template <class F>
constexpr std::array<double, 256> decode_table() noexcept {
  std::array<double, 256> t{};
  for (std::size_t c = 0; c < t.size(); ++c) t[c] = decode<F>(c);
  return t;
}

template <class F>
constexpr std::array<double, 256> f8_values = decode_table<F>();

/// The signed F8 formats: decoding through a table of their 256 values.
template <class F>
struct f8_codec : small_codec<F> {
  [[nodiscard]] static double get(const std::byte* p) noexcept {
    return f8_values<F>[load<std::uint8_t>(p)];
  }
};

constexpr std::array<double, 256> e8m0_values = [] {
  std::array<double, 256> t{};
  for (std::size_t c = 0; c < t.size(); ++c) t[c] = e8m0_decode(static_cast<std::uint8_t>(c));
  return t;
}();

struct e8m0_codec {
  static constexpr std::size_t size = 1;
  [[nodiscard]] static double get(const std::byte* p) noexcept {
    return e8m0_values[load<std::uint8_t>(p)];
  }
  template <class V>
  static void put(std::byte* p, V v) noexcept {
    if constexpr (std::is_integral_v<V>) store<std::uint8_t>(p, e8m0_encode_integer(v));
    else if constexpr (std::is_same_v<V, float>) store<std::uint8_t>(p, e8m0_encode(widen(v)));
    else store<std::uint8_t>(p, e8m0_encode(v));
  }
};

/// The codecs in `dtype` order: the index of a whole-byte dtype is its enum value.
using codecs = std::tuple<
    bool_codec, int_codec<std::uint8_t>, int_codec<std::int8_t>, int_codec<std::uint16_t>,
    int_codec<std::int16_t>, int_codec<std::uint32_t>, int_codec<std::int32_t>,
    int_codec<std::uint64_t>, int_codec<std::int64_t>, small_codec<f16_format>, bf16_codec,
    f32_codec, f64_codec, c64_codec, f8_codec<e4m3_format>, f8_codec<e5m2_format>, e8m0_codec,
    f8_codec<e4m3fnuz_format>, f8_codec<e5m2fnuz_format>>;
constexpr std::size_t codec_count = std::tuple_size_v<codecs>;
static_assert(codec_count == static_cast<std::size_t>(dtype::f8_e5m2fnuz) + 1);
static_assert(static_cast<std::size_t>(dtype::f6_e2m3) == codec_count);

// ---------------------------------------------------------------- the kernel table

using kernel = void (*)(const std::byte*, std::byte*, std::size_t) noexcept;

template <class From, class To>
void run(const std::byte* in, std::byte* out, std::size_t count) noexcept {
  for (std::size_t i = 0; i < count; ++i) {
    To::put(out + i * To::size, From::get(in + i * From::size));
  }
}

template <std::size_t From, std::size_t... To>
constexpr std::array<kernel, codec_count> kernel_row(std::index_sequence<To...> /*to*/) noexcept {
  return {&run<std::tuple_element_t<From, codecs>, std::tuple_element_t<To, codecs>>...};
}

template <std::size_t... From>
constexpr std::array<std::array<kernel, codec_count>, codec_count> kernel_table(
    std::index_sequence<From...> /*from*/) noexcept {
  return {kernel_row<From>(std::make_index_sequence<codec_count>{})...};
}

constexpr auto kernels = kernel_table(std::make_index_sequence<codec_count>{});


// ---------------------------------------------------------------- checks

[[nodiscard]] constexpr bool valid(dtype t) noexcept {
  return static_cast<std::size_t>(t) < detail::dtype_count;
}

[[noreturn]] void throw_not_castable(dtype from, dtype to) {
  throw std::invalid_argument("ckpt: cannot cast " + std::string(to_string(from)) + " to " +
                              std::string(to_string(to)) +
                              ": F6_E2M3, F6_E3M2 and F4 are raw bytes only");
}

void check_valid(dtype t) {
  if (!valid(t)) {
    throw std::invalid_argument("ckpt: invalid dtype value " +
                                std::to_string(static_cast<unsigned>(t)));
  }
}

/// Throws unless `have` bytes hold `count` elements of dtype `t` (a whole number of bytes).
void check_size(const char* which, std::size_t have, std::size_t count, dtype t) {
  const std::size_t bits = detail::bit_width(t);
  const std::size_t max = std::numeric_limits<std::size_t>::max();
  if (count <= max / bits && count * bits / 8 <= have) return;
  const std::string need =
      count <= max / bits ? std::to_string(count * bits / 8) : "more than " + std::to_string(max);
  throw std::invalid_argument("ckpt: cannot convert " + std::to_string(count) + " " +
                              std::string(to_string(t)) + " elements: the " + which + " holds " +
                              std::to_string(have) + " bytes, " + need + " are needed");
}

}  // namespace

namespace detail {

bool can_cast(dtype from, dtype to) noexcept {
  if (!valid(from) || !valid(to)) return false;
  return from == to || (!is_sub_byte(from) && !is_sub_byte(to));
}

tensor cast_tensor(const tensor& x, dtype to) {
  const dtype from = x.dtype();
  if (to == from) return x;
  check_valid(to);
  if (!can_cast(from, to)) throw_not_castable(from, to);
  const auto count = static_cast<std::size_t>(x.numel());
  const std::span<const std::int64_t> shape = x.shape();
  // Converted band by band: a loaded file's bands are read with pread, not through the mapping.
  const std::size_t in_size = bit_width(from) / 8, out_size = bit_width(to) / 8;
  return tensor::make(to, dims(shape.begin(), shape.end()), [&](std::span<std::byte> out) {
    if (count == 0) return;
    tensor_access::for_each_band(x, in_size, [&](std::size_t first, std::span<const std::byte> in) {
      const std::size_t n = in.size() / in_size;
      convert(from, in, to, out.subspan(first * out_size, n * out_size), n);
    });
  });
}

void convert(dtype from, std::span<const std::byte> in, dtype to, std::span<std::byte> out,
             std::size_t count) {
  check_valid(from);
  check_valid(to);
  if (from == to) {
    const std::size_t bits = bit_width(from);
    if ((count % 8) * bits % 8 != 0) {
      throw std::invalid_argument("ckpt: " + std::to_string(count) + " " +
                                  std::string(to_string(from)) +
                                  " elements are not a whole number of bytes");
    }
    check_size("input", in.size(), count, from);
    check_size("output", out.size(), count, to);
    const std::size_t nbytes = count * bits / 8;
    if (nbytes != 0) std::memcpy(out.data(), in.data(), nbytes);
    return;
  }
  if (is_sub_byte(from) || is_sub_byte(to)) throw_not_castable(from, to);
  check_size("input", in.size(), count, from);
  check_size("output", out.size(), count, to);
  if (count == 0) return;
  kernels[static_cast<std::size_t>(from)][static_cast<std::size_t>(to)](in.data(), out.data(),
                                                                         count);
}

}  // namespace detail
}  // namespace ckpt
