// examples/hf_gpt2: a Hugging Face GPT-2 checkpoint fine-tuned in C++ and handed back.
//
//   hf_gpt2 [<data folder>] <work folder>   (default data: examples/hf_gpt2/data, compiled in)
//
// 1. Loads `<data>/gpt2`, a folder as transformers' `save_pretrained` writes it (model.safetensors
//    in Hugging Face's names and layouts, config.json), into an Eigen GPT-2 whose field names are
//    Hugging Face's (`h.0.attn.c_attn.weight`, ...), and checks its logits for the token sequence
//    of `<data>/expected.safetensors` against those torch computed.
// 2. Fine-tunes every weight for a few Adam steps (`ckpt::adam`) on that sequence, with next-token
//    cross entropy and a backward pass written by hand (checked against a finite difference),
//    saving each step with a `ckpt::checkpoint_manager` into `<work>/run`.
// 3. Exports the last step the manager wrote to `<work>/export` (model.safetensors in Hugging
//    Face's names, format "pt", no tied `lm_head.weight`; config.json beside it), which
//    `GPT2LMHeadModel.from_pretrained` loads; loads the export back and checks it bit for bit.
//    The fine-tuned logits, the losses and the settings go to `<work>/finetuned.safetensors` for
//    `make_checkpoint.py --check <work>/export`.
//
// Exits 0 if every check passes, 1 if one fails, 2 on an error (usage, a missing file or entry, a
// run folder that already holds steps).

#include <ckpt/ckpt.hpp>

#include <boost/json.hpp>

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <vector>

#ifndef CKPT_HF_GPT2_DATA
#define CKPT_HF_GPT2_DATA "data"
#endif

namespace {

namespace fs = std::filesystem;

// [hf_gpt2_model]
using matrix = Eigen::MatrixXf;    // any storage order: ckpt reads and writes C order
using row = Eigen::RowVectorXf;    // saved with shape [n], as torch's 1-d parameters

// The parameters, named as transformers' GPT2Model names them: ckpt names each leaf by its path
// of field names (Boost.PFR), and a std::vector's elements by position, so `h[0].attn.c_attn.weight`
// is the entry "h.0.attn.c_attn.weight"; with the prefix "transformer", Hugging Face's name.
struct layer_norm {
  row weight, bias;  // [n_embd]
};
struct conv1d {      // transformers' Conv1D: y = x W + b, W stored [in, out]
  matrix weight;     // [in, out]
  row bias;          // [out]
};
struct attention {
  conv1d c_attn;     // [n_embd, 3 n_embd]: q, k and v side by side along the output axis
  conv1d c_proj;     // [n_embd, n_embd]
};
struct feed_forward {
  conv1d c_fc;       // [n_embd, 4 n_embd]
  conv1d c_proj;     // [4 n_embd, n_embd]
};
struct block {
  layer_norm ln_1;
  attention attn;
  layer_norm ln_2;
  feed_forward mlp;
};
struct embedding {
  matrix weight;     // [rows, n_embd]
};
struct gpt2 {
  embedding wte;     // [vocab, n_embd]; also the head (tied): logits = ln_f(x) wteᵀ
  embedding wpe;     // [n_positions, n_embd]
  std::vector<block> h;
  layer_norm ln_f;
};
// [hf_gpt2_model]

struct config {
  int vocab_size = 0, n_positions = 0, n_embd = 0, n_layer = 0, n_head = 0;
  float layer_norm_epsilon = 1e-5f;
};

/// The GPT2Config fields the model needs, from `folder/config.json` (parsed with Boost.JSON).
/// \throws std::runtime_error if the file cannot be read or parsed, is not a GPT-2 configuration
///   with gelu_new and tied embeddings, lacks a field or has one of the wrong kind, or its sizes
///   are inconsistent.
config read_config(const fs::path& folder) {
  const fs::path file = folder / "config.json";
  std::ifstream in(file);
  if (!in) throw std::runtime_error("cannot read '" + file.string() + "'");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const auto fail = [&](const std::string& why) { return std::runtime_error("'" + file.string() + "': " + why); };
  boost::system::error_code ec;
  const boost::json::value parsed = boost::json::parse(buffer.str(), ec);
  if (ec || !parsed.is_object()) throw fail("not a JSON object" + (ec ? " (" + ec.message() + ")" : std::string()));
  const boost::json::object& fields = parsed.as_object();
  const auto text = [&](std::string_view key) -> std::string {
    const boost::json::value* v = fields.if_contains(key);
    if (v == nullptr || !v->is_string()) throw fail("\"" + std::string(key) + "\" is absent or not a string");
    return std::string(v->as_string());
  };
  const auto number = [&]<class T>(std::string_view key, T) -> T {
    const boost::json::value* v = fields.if_contains(key);
    if (v == nullptr || !v->is_number()) throw fail("\"" + std::string(key) + "\" is absent or not a number");
    if constexpr (std::is_integral_v<T>) {
      if (!v->is_int64()) throw fail("\"" + std::string(key) + "\" is not an integer");
      return static_cast<T>(v->as_int64());
    } else {
      return static_cast<T>(v->to_number<double>());
    }
  };
  if (text("model_type") != "gpt2") throw fail("model_type is not \"gpt2\"");
  if (fields.contains("activation_function") && text("activation_function") != "gelu_new")
    throw fail("this example implements activation_function \"gelu_new\" only");
  if (const boost::json::value* tie = fields.if_contains("tie_word_embeddings"); tie != nullptr && *tie != true)
    throw fail("this example implements tied word embeddings only");
  config c;
  c.vocab_size = number("vocab_size", int{});
  c.n_positions = number("n_positions", int{});
  c.n_embd = number("n_embd", int{});
  c.n_layer = number("n_layer", int{});
  c.n_head = number("n_head", int{});
  c.layer_norm_epsilon = number("layer_norm_epsilon", float{});
  if (c.vocab_size < 1 || c.n_positions < 1 || c.n_embd < 1 || c.n_layer < 0 || c.n_head < 1 ||
      c.n_embd % c.n_head != 0)
    throw fail("inconsistent sizes (n_embd must be a multiple of n_head)");
  return c;
}

/// A model of `c`'s shapes (values unset): the template `read_params` fills and checks against.
gpt2 shaped(const config& c) {
  const int e = c.n_embd;
  auto norm = [e] { return layer_norm{row(e), row(e)}; };
  auto conv = [](int in, int out) { return conv1d{matrix(in, out), row(out)}; };
  gpt2 m{{matrix(c.vocab_size, e)}, {matrix(c.n_positions, e)}, {}, norm()};
  m.h.assign(static_cast<std::size_t>(c.n_layer),
             block{norm(), {conv(e, 3 * e), conv(e, e)}, norm(), {conv(e, 4 * e), conv(4 * e, e)}});
  return m;
}

// --- the forward pass ---

struct norm_cache {
  matrix xhat;            // (x - mean) / sqrt(var + eps), per row
  Eigen::VectorXf rstd;   // 1 / sqrt(var + eps), per row
};

struct block_cache {
  norm_cache n1, n2;
  matrix a;               // ln_1(x), the input of c_attn
  matrix qkv;             // c_attn(a): [T, 3E]
  std::vector<matrix> p;  // per head, the attention probabilities [T, T]
  matrix ctx;             // the heads' outputs side by side, the input of attn.c_proj
  matrix m;               // ln_2(x), the input of c_fc
  matrix f;               // c_fc(m), the input of the GELU
  matrix g;               // gelu_new(f), the input of mlp.c_proj
};

struct forward_cache {
  std::vector<block_cache> blocks;
  norm_cache nf;
  matrix xf;              // ln_f(x), the input of the head
};

/// torch.nn.LayerNorm over each row of `x` (biased variance), caching what the backward needs.
matrix layer_norm_forward(const layer_norm& p, const matrix& x, float eps, norm_cache& cache) {
  const Eigen::VectorXf mean = x.rowwise().mean();
  const matrix centered = x.colwise() - mean;
  cache.rstd = (centered.array().square().rowwise().mean() + eps).rsqrt().matrix();
  cache.xhat = centered.array().colwise() * cache.rstd.array();
  return ((cache.xhat.array().rowwise() * p.weight.array()).rowwise() + p.bias.array()).matrix();
}

/// The gradient of a layer norm's input for `dy`, the gradient of its output; adds the gradients
/// of its weight and bias to `grad`.
matrix layer_norm_backward(const layer_norm& p, const norm_cache& cache, const matrix& dy, layer_norm& grad) {
  grad.weight += (dy.array() * cache.xhat.array()).colwise().sum().matrix();
  grad.bias += dy.colwise().sum();
  const Eigen::ArrayXXf dxhat = dy.array().rowwise() * p.weight.array();
  const Eigen::ArrayXf mean_dxhat = dxhat.rowwise().mean();
  const Eigen::ArrayXf mean_dxhat_xhat = (dxhat * cache.xhat.array()).rowwise().mean();
  const Eigen::ArrayXXf centered = (dxhat.colwise() - mean_dxhat) -
                                   (cache.xhat.array().colwise() * mean_dxhat_xhat);
  return (centered.colwise() * cache.rstd.array()).matrix();
}

/// Conv1D: x W + b, one row per position.
matrix affine(const conv1d& c, const matrix& x) { return (x * c.weight).rowwise() + c.bias; }

constexpr float gelu_c = 0.7978845608028654f;  // sqrt(2 / pi)

/// GELU, tanh approximation ("gelu_new", as GPT-2 computes it).
float gelu_new(float x) { return 0.5f * x * (1.0f + std::tanh(gelu_c * (x + 0.044715f * x * x * x))); }

/// The derivative of `gelu_new`.
float gelu_new_derivative(float x) {
  const float t = std::tanh(gelu_c * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * gelu_c * (1.0f + 3.0f * 0.044715f * x * x);
}

/// The logits [T, vocab] of GPT2LMHeadModel for `ids` (causal attention, pre-norm blocks, head
/// tied to wte), filling `cache` for the backward pass.
/// \throws std::invalid_argument if a token is out of the vocabulary or the sequence too long.
/// The query, key and value columns of attention head `head` in the fused c_attn output `qkv`
/// ([tokens, 3 * e]: all queries, then all keys, then all values; `hd` columns a head).
auto head_columns(const matrix& qkv, int head, int e, int hd) {
  return std::tuple{qkv.middleCols(head * hd, hd), qkv.middleCols(e + head * hd, hd),
                    qkv.middleCols(2 * e + head * hd, hd)};
}

matrix forward(const gpt2& model, const config& c, const std::vector<int>& ids, forward_cache& cache) {
  const auto t_len = static_cast<Eigen::Index>(ids.size());
  if (t_len > model.wpe.weight.rows())
    throw std::invalid_argument("a sequence of " + std::to_string(t_len) + " tokens exceeds n_positions");
  const int e = c.n_embd, hd = c.n_embd / c.n_head;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  matrix x(t_len, e);
  for (Eigen::Index t = 0; t < t_len; ++t) {
    if (ids[static_cast<std::size_t>(t)] < 0 || ids[static_cast<std::size_t>(t)] >= model.wte.weight.rows())
      throw std::invalid_argument("token " + std::to_string(ids[static_cast<std::size_t>(t)]) + " is out of the vocabulary");
    x.row(t) = model.wte.weight.row(ids[static_cast<std::size_t>(t)]) + model.wpe.weight.row(t);
  }
  cache.blocks.resize(model.h.size());
  for (std::size_t l = 0; l < model.h.size(); ++l) {
    const block& b = model.h[l];
    block_cache& k = cache.blocks[l];
    k.a = layer_norm_forward(b.ln_1, x, c.layer_norm_epsilon, k.n1);
    k.qkv = affine(b.attn.c_attn, k.a);
    k.ctx.resize(t_len, e);
    k.p.resize(static_cast<std::size_t>(c.n_head));
    for (int head = 0; head < c.n_head; ++head) {
      const auto [q, key, v] = head_columns(k.qkv, head, e, hd);
      matrix& p = k.p[static_cast<std::size_t>(head)];
      p = (q * key.transpose()) * scale;
      // Causal softmax: position i attends to 0..i; the masked scores get probability 0 exactly,
      // as transformers' (the lowest float before the softmax) do.
      for (Eigen::Index i = 0; i < t_len; ++i) {
        auto r = p.row(i).head(i + 1);
        r = (r.array() - r.maxCoeff()).exp().matrix();
        r /= r.sum();
        p.row(i).tail(t_len - i - 1).setZero();
      }
      k.ctx.middleCols(head * hd, hd) = p * v;
    }
    x += affine(b.attn.c_proj, k.ctx);
    k.m = layer_norm_forward(b.ln_2, x, c.layer_norm_epsilon, k.n2);
    k.f = affine(b.mlp.c_fc, k.m);
    k.g = k.f.unaryExpr(&gelu_new);
    x += affine(b.mlp.c_proj, k.g);
  }
  cache.xf = layer_norm_forward(model.ln_f, x, c.layer_norm_epsilon, cache.nf);
  return cache.xf * model.wte.weight.transpose();
}

/// The logits of `forward` without keeping the cache.
matrix forward(const gpt2& model, const config& c, const std::vector<int>& ids) {
  forward_cache cache;
  return forward(model, c, ids, cache);
}

/// GPT2LMHeadModel's loss with labels = ids: the cross entropy of token t+1 given positions
/// 0..t, averaged over t = 0..T-2. If `dlogits` is given, it receives the loss's gradient.
double next_token_loss(const matrix& logits, const std::vector<int>& ids, matrix* dlogits = nullptr) {
  const Eigen::Index n = logits.rows() - 1;
  if (n < 1) throw std::invalid_argument("next_token_loss needs at least two tokens");
  if (dlogits) dlogits->setZero(logits.rows(), logits.cols());
  double total = 0;
  for (Eigen::Index t = 0; t < n; ++t) {
    const float top = logits.row(t).maxCoeff();
    const Eigen::ArrayXf e = (logits.row(t).array() - top).exp().transpose();
    const double sum = e.cast<double>().sum();
    const int target = ids[static_cast<std::size_t>(t + 1)];
    total += std::log(sum) + top - logits(t, target);
    if (dlogits) {
      dlogits->row(t) = (e / static_cast<float>(sum)).matrix().transpose() / static_cast<float>(n);
      (*dlogits)(t, target) -= 1.0f / static_cast<float>(n);
    }
  }
  return total / static_cast<double>(n);
}

/// The loss for `ids` and its gradient with respect to every parameter (same structure as `model`).
double loss_and_gradient(const gpt2& model, const config& c, const std::vector<int>& ids, gpt2& grad) {
  forward_cache cache;
  const matrix logits = forward(model, c, ids, cache);
  matrix dlogits;
  const double loss = next_token_loss(logits, ids, &dlogits);
  const int e = c.n_embd, hd = c.n_embd / c.n_head;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  grad = ckpt::zeros_like(model);

  // The head is wte: logits = xf wteᵀ.
  grad.wte.weight += dlogits.transpose() * cache.xf;
  matrix dx = layer_norm_backward(model.ln_f, cache.nf, dlogits * model.wte.weight, grad.ln_f);
  for (std::size_t l = model.h.size(); l-- > 0;) {
    const block& b = model.h[l];
    const block_cache& k = cache.blocks[l];
    block& g = grad.h[l];
    // x += mlp.c_proj(gelu(c_fc(ln_2(x)))): dx reaches the MLP and passes by it.
    g.mlp.c_proj.weight += k.g.transpose() * dx;
    g.mlp.c_proj.bias += dx.colwise().sum();
    const matrix df = ((dx * b.mlp.c_proj.weight.transpose()).array() * k.f.unaryExpr(&gelu_new_derivative).array()).matrix();
    g.mlp.c_fc.weight += k.m.transpose() * df;
    g.mlp.c_fc.bias += df.colwise().sum();
    dx += layer_norm_backward(b.ln_2, k.n2, df * b.mlp.c_fc.weight.transpose(), g.ln_2);
    // x += attn.c_proj(heads(c_attn(ln_1(x)))).
    g.attn.c_proj.weight += k.ctx.transpose() * dx;
    g.attn.c_proj.bias += dx.colwise().sum();
    const matrix dctx = dx * b.attn.c_proj.weight.transpose();
    matrix dqkv(k.qkv.rows(), k.qkv.cols());
    for (int head = 0; head < c.n_head; ++head) {
      const auto [q, key, v] = head_columns(k.qkv, head, e, hd);
      const matrix& p = k.p[static_cast<std::size_t>(head)];
      const auto dout = dctx.middleCols(head * hd, hd);
      const matrix dp = dout * v.transpose();
      // Softmax backward, row by row; masked entries have p = 0 and get no gradient.
      const Eigen::VectorXf dot = (dp.array() * p.array()).rowwise().sum();
      const matrix ds = ((dp.colwise() - dot).array() * p.array()).matrix() * scale;
      dqkv.middleCols(head * hd, hd) = ds * key;
      dqkv.middleCols(e + head * hd, hd) = ds.transpose() * q;
      dqkv.middleCols(2 * e + head * hd, hd) = p.transpose() * dout;
    }
    g.attn.c_attn.weight += k.a.transpose() * dqkv;
    g.attn.c_attn.bias += dqkv.colwise().sum();
    dx += layer_norm_backward(b.ln_1, k.n1, dqkv * b.attn.c_attn.weight.transpose(), g.ln_1);
  }
  for (std::size_t t = 0; t < ids.size(); ++t) {
    grad.wte.weight.row(ids[t]) += dx.row(static_cast<Eigen::Index>(t));
    grad.wpe.weight.row(static_cast<Eigen::Index>(t)) += dx.row(static_cast<Eigen::Index>(t));
  }
  return loss;
}

/// Checks the gradient against a central difference of the loss along the gradient's own
/// direction u = g/|g|: (L(θ + εu) - L(θ - εu)) / 2ε must be |g| within 1%. Returns that relative
/// difference.
double gradient_check(const gpt2& model, const config& c, const std::vector<int>& ids) {
  gpt2 grad;
  (void)loss_and_gradient(model, c, ids, grad);
  double norm2 = 0;
  ckpt::for_each_leaf([&](std::string_view, const auto& g) { norm2 += g.template cast<double>().squaredNorm(); }, grad);
  const auto norm = static_cast<float>(std::sqrt(norm2));
  const float eps = 1e-2f;
  auto moved = [&](float sign) {
    gpt2 out = model;
    ckpt::zip_leaves([&](auto& p, const auto& g) { p += (sign * eps / norm) * g; }, out, grad);
    return out;
  };
  const double up = next_token_loss(forward(moved(1), c, ids), ids);
  const double down = next_token_loss(forward(moved(-1), c, ids), ids);
  const double slope = (up - down) / (2 * static_cast<double>(eps));
  return std::abs(slope - norm) / norm;
}

/// True if the two checkpoints hold the same names, dtypes, shapes and bytes.
bool same_entries(const ckpt::checkpoint& a, const ckpt::checkpoint& b, std::string& why) {
  if (a.names() != b.names()) {
    why = "the entry names differ";
    return false;
  }
  for (const auto& [name, x] : a) {
    const ckpt::tensor& y = b.get(name);
    if (x.dtype() != y.dtype() || !std::ranges::equal(x.shape(), y.shape()) ||
        x.nbytes() != y.nbytes() || std::memcmp(x.bytes().data(), y.bytes().data(), x.nbytes()) != 0) {
      why = "entry '" + name + "' differs";
      return false;
    }
  }
  return true;
}

constexpr float logits_tolerance = 1e-4f;
constexpr int fine_tune_steps = 5;
constexpr double learning_rate = 1e-3;

/// The example: load `data/gpt2`, check the logits against `data/expected.safetensors`, fine-tune
/// with checkpoints in `work/run`, export to `work/export` and check the export. Returns the exit
/// status (0 passed, 1 a check failed); throws on an error.
int run(const fs::path& data, const fs::path& work) {
  const config cfg = read_config(data / "gpt2");
  // The manager of the fine-tune's steps, opened first: a run folder that holds steps is refused.
  const fs::path run_dir = work / "run";
  ckpt::checkpoint_manager manager(run_dir, {.max_to_keep = 2});
  if (manager.latest_step())
    throw std::runtime_error("'" + run_dir.string() + "' already holds checkpoints: give an empty work folder");

  // [hf_gpt2_load]
  // The folder save_pretrained wrote: model.safetensors here (a pytorch_model.bin, or shards of
  // either kind, load the same way). Names: transformer.wte.weight, transformer.h.0.ln_1.weight...
  ckpt::checkpoint hf = ckpt::load(data / "gpt2");
  // Older GPT-2 files also store each block's causal mask (attn.bias, attn.masked_bias): buffers,
  // not weights. And the head is wte (tied): a .bin that keeps lm_head.weight holds it twice.
  hf = ckpt::drop(hf, ckpt::name_pattern(R"(\.attn\.(masked_)?bias$|^lm_head\.weight$)"));
  // The struct's leaf names are Hugging Face's below "transformer."; strict: an entry the model
  // does not read is an error, as a missing one or a wrong shape is (each message names it).
  gpt2 model = shaped(cfg);
  ckpt::read_params(hf, model, {.prefix = "transformer", .strict = true});
  // [hf_gpt2_load]

  // The forward pass against torch's logits.
  const ckpt::checkpoint expected = ckpt::load(data / "expected.safetensors");
  std::vector<int> ids;
  for (const std::int64_t id : expected.get("input_ids").as<std::int64_t>()) ids.push_back(static_cast<int>(id));
  const auto torch_logits = ckpt::matrix_view<float>(expected.get("logits"));
  const matrix logits = forward(model, cfg, ids);
  if (logits.rows() != torch_logits.rows() || logits.cols() != torch_logits.cols())
    throw std::runtime_error("expected.safetensors: logits are " + std::to_string(torch_logits.rows()) + "x" +
                             std::to_string(torch_logits.cols()) + " but the model gives " +
                             std::to_string(logits.rows()) + "x" + std::to_string(logits.cols()));
  const float diff = (logits - torch_logits).cwiseAbs().maxCoeff();
  std::printf("loaded %s: %zu entries, %d blocks; forward pass on %zu tokens: max |logits - torch| = %.3g (tolerance %.0e)\n",
              (data / "gpt2").string().c_str(), hf.size(), cfg.n_layer, ids.size(), static_cast<double>(diff),
              static_cast<double>(logits_tolerance));
  if (!(diff < logits_tolerance)) {
    std::fprintf(stderr, "hf_gpt2: the forward pass differs from torch's logits by %g\n", static_cast<double>(diff));
    return 1;
  }

  const double gradient_error = gradient_check(model, cfg, ids);
  std::printf("gradient vs a central difference along it: relative error %.2g (tolerance 1e-2)\n", gradient_error);
  if (!(gradient_error < 1e-2)) {
    std::fprintf(stderr, "hf_gpt2: the hand-written gradient disagrees with a finite difference\n");
    return 1;
  }

  // Fine-tune: Adam on every weight, each step saved by the manager (weights, moments, step).
  const ckpt::adam opt{.lr = learning_rate};
  ckpt::adam_state<gpt2> state = opt.init(model);
  Eigen::VectorXf losses(fine_tune_steps);
  for (int step = 0; step < fine_tune_steps; ++step) {
    gpt2 grad;
    losses(step) = static_cast<float>(loss_and_gradient(model, cfg, ids, grad));
    opt.update(model, grad, state);
    manager.save(state.step, ckpt::training_state(model, state), {{"loss", std::to_string(losses(step))}});
    std::printf("step %lld: loss %.6f (saved %s)\n", static_cast<long long>(state.step),
                static_cast<double>(losses(step)), manager.path_of(state.step).filename().string().c_str());
  }
  const matrix tuned_logits = forward(model, cfg, ids);
  const double final_loss = next_token_loss(tuned_logits, ids);
  std::printf("after %d steps: loss %.6f\n", fine_tune_steps, final_loss);
  if (!(final_loss < losses(0))) {
    std::fprintf(stderr, "hf_gpt2: fine-tuning did not lower the loss\n");
    return 1;
  }

  // [hf_gpt2_export]
  // Export the last step the manager wrote: its model.* entries, in Hugging Face's names. The
  // model has no lm_head: save_pretrained leaves the tied head out too, from_pretrained ties it.
  const fs::path out = work / "export";
  fs::create_directories(out);
  ckpt::checkpoint last = manager.load(*manager.latest_step());  // model.*, optim.*, digest
  last = ckpt::select(last, ckpt::name_pattern(R"(^model\.)"));
  last = ckpt::rename(last, ckpt::name_pattern(R"(^model\.)"), "transformer.");
  // from_pretrained refuses a safetensors file whose "format" is not pt, tf, flax or mlx.
  ckpt::save(out / "model.safetensors", last.with_metadata({{"format", "pt"}}));
  fs::copy_file(data / "gpt2" / "config.json", out / "config.json", fs::copy_options::overwrite_existing);
  // [hf_gpt2_export]

  // The export, loaded back as a Hugging Face folder, must be the fine-tuned weights, bit for bit.
  const ckpt::checkpoint back = ckpt::load(out);
  std::string why;
  const auto format = back.metadata().find("format");
  if (format == back.metadata().end() || format->second != "pt" || back.contains("lm_head.weight") ||
      !same_entries(back, ckpt::of_params(model, "transformer"), why)) {
    std::fprintf(stderr, "hf_gpt2: the export in '%s' is not the fine-tuned model: %s\n", out.string().c_str(),
                 why.empty() ? "format is not \"pt\", or it holds lm_head.weight" : why.c_str());
    return 1;
  }
  gpt2 reloaded = shaped(cfg);
  ckpt::read_params(back, reloaded, {.prefix = "transformer", .strict = true});
  if ((forward(reloaded, cfg, ids) - tuned_logits).cwiseAbs().maxCoeff() != 0.0f) {
    std::fprintf(stderr, "hf_gpt2: the reloaded export gives other logits\n");
    return 1;
  }
  std::printf("exported %s (%zu entries, format pt, config.json beside it): reloaded bit for bit\n",
              out.string().c_str(), back.size());

  // For make_checkpoint.py --check: the fine-tuned logits, the losses, the settings.
  ckpt::save(work / "finetuned.safetensors",
             ckpt::concat({ckpt::of_params(tuned_logits, "logits"), ckpt::of_params(losses, "losses"),
                           ckpt::of_int("steps", fine_tune_steps),
                           ckpt::of_params(learning_rate, "lr")}));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: hf_gpt2 [<data folder>] <work folder>\n"
                         "  <data folder>: gpt2/ (a save_pretrained folder) and expected.safetensors\n"
                         "                 (default: %s)\n"
                         "  <work folder>: receives run/, export/ and finetuned.safetensors\n",
                 CKPT_HF_GPT2_DATA);
    return 2;
  }
  try {
    return run(argc == 3 ? argv[1] : CKPT_HF_GPT2_DATA, argv[argc - 1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hf_gpt2: %s\n", e.what());
    return 2;
  }
}
