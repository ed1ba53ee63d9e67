// Every kernel against its CPU twin from one table, in the style of ggml's test-backend-ops: a
// case names its kernels, its buffers with their starting values, how to run it through a
// KernelTable, and which buffers to compare with what tolerance (each derived where it is
// written). The harness runs each case through Backend::kernels() twice on the same values: on
// the CPU backend (the reference, always fp32 activations: a bf16 case's values are ones bf16
// holds) and on the CUDA backend (the SIMT emulation in test_cuda_emulated, the GPU in
// test_cuda_device, which skips without one). A backend that does not support a case's kernel
// for its dtype (Backend::supports) skips the case, as test-backend-ops does, saying so. Every
// kernel of kernels/ops.inc has cases (CudaOps.EveryKernelIsInTheTable): the elementwise ones,
// the embeddings, layernorm (and the residual addition fused with it), the matmuls (with GELU in the
// epilogue too), both attentions, the classifier, the optimizer's, and
// the codecs (blobs byte for byte). Cases whose inputs are another kernel's outputs (the attention
// backward's probabilities, layernorm's statistics) take the CPU's, so a difference is that
// kernel's. Checks beyond a twin comparison (a rounding formula, refused dtypes) follow the table;
// each kernel's others (determinism, the cuBLASLt calls, codec edge cases) are in its own file.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/codec_format.h"
#include "kernels/cpu/ops.h"
#include "kernels/rng.h"
#include "src/engine/backend.h"
#include "tests/cuda/cuda_test_support.h"

namespace adacc::test {
namespace {

// A buffer's elements: the case's activation dtype, fp32 (statistics, losses, gradients, optimizer
// state), bytes (dropout masks, codec blobs and scratch), int32 (token ids, targets) or bf16 in
// every case (AdamW's working copy of the parameters).
enum class Elem { act, f32, u8, i32, b16 };

struct Buffer {
    Elem elem;
    std::vector<float> values;  // starting contents (an act buffer's are values its dtype holds)
};

// Compared after the run: bit for bit when rel and abs are both 0 and there is no bound, else
// within rel |want| + abs of the CPU's fp32 result, a tolerance stated for fp32 (bf16_tolerance
// widens it). A bound instead gives each element's absolute part, derived for the case's dtype
// from its inputs and the CPU's result (want): |got - want| <= bound(want)[i] + rel |want|, with
// rel and the bound used as they are (sums whose error depends on their terms: matmul, attention).
struct Check {
    int buffer;
    double rel = 0, abs = 0;
    std::function<std::vector<double>(const std::vector<float>& want)> bound = nullptr;
    std::size_t count = 0;  // elements compared from the buffer's start (0: all of them)
};

class Placed;

struct OpCase {
    std::string name;
    DType activation = DType::f32;
    std::vector<Kernel> kernels;  // what the case calls: each backend must support them
    std::vector<Buffer> buffers;
    std::function<void(const KernelTable&, const KernelContext&, const Placed&)> run;
    std::vector<Check> checks;
    // The CUDA result in bf16 is its fp32 result on the same values rounded once ("computed in
    // fp32, rounded on store"), checked bit for bit: elementwise kernels only.
    bool rounds_once = false;
};

OpCase op_case(std::string name, DType activation, std::vector<Kernel> kernels, std::vector<Buffer> buffers) {
    OpCase c;
    c.name = std::move(name);
    c.activation = activation;
    c.kernels = std::move(kernels);
    c.buffers = std::move(buffers);
    return c;
}

// A case's buffers in one backend's memory, act buffers of type `activation`.
class Placed {
public:
    Placed(Backend& backend, const OpCase& c, DType activation) : backend_(backend) {
        for (const Buffer& b : c.buffers) {
            const DType type = b.elem == Elem::act   ? activation
                               : b.elem == Elem::f32 ? DType::f32
                               : b.elem == Elem::u8  ? DType::u8
                               : b.elem == Elem::b16 ? DType::bf16
                                                     : DType::i32;
            const std::vector<unsigned char> bytes = encode(b.values, type);
            arenas_.emplace_back(backend, std::max<std::size_t>(bytes.size(), 1));
            types_.push_back(type);
            backend.copy_to_device(arenas_.back().data(), bytes.data(), bytes.size());
        }
    }
    Act act(int i) const { return Act(arenas_[i].data(), types_[i]); }
    float* f32(int i) const { return act(i).as<float>(); }
    unsigned char* u8(int i) const { return act(i).as<unsigned char>(); }
    const int* i32(int i) const {
        if (types_[i] != DType::i32) throw std::logic_error("buffer " + std::to_string(i) + " holds no int32");
        return static_cast<const int*>(arenas_[i].data());
    }
    void* data(int i) const { return arenas_[i].data(); }
    // Values into buffer i: what a kernel returned to the host (a codec's k, its error measure),
    // kept there beside the case's other outputs.
    void write(int i, const std::vector<float>& values) const {
        const std::vector<unsigned char> bytes = encode(values, types_[i]);
        backend_.copy_to_device(arenas_[i].data(), bytes.data(), bytes.size());
    }
    std::vector<float> read(int i, std::size_t n) const {
        std::vector<unsigned char> bytes(n * dtype_size(types_[i]));
        backend_.copy_to_host(bytes.data(), arenas_[i].data(), bytes.size());
        return decode(bytes, types_[i]);
    }

private:
    static std::vector<unsigned char> encode(const std::vector<float>& v, DType type) {
        std::vector<unsigned char> out(v.size() * dtype_size(type));
        for (std::size_t i = 0; i < v.size(); ++i) {
            if (type == DType::u8) out[i] = static_cast<unsigned char>(v[i]);
            if (type == DType::i32) {
                const int k = static_cast<int>(v[i]);
                std::memcpy(&out[4 * i], &k, 4);
            }
            if (type == DType::f32) std::memcpy(&out[4 * i], &v[i], 4);
            if (type == DType::bf16) {
                const bf16 b = to_bf16(v[i]);
                std::memcpy(&out[2 * i], &b, 2);
            }
        }
        return out;
    }
    static std::vector<float> decode(const std::vector<unsigned char>& bytes, DType type) {
        std::vector<float> out(bytes.size() / dtype_size(type));
        for (std::size_t i = 0; i < out.size(); ++i) {
            if (type == DType::u8) out[i] = bytes[i];
            if (type == DType::i32) {
                int k;
                std::memcpy(&k, &bytes[4 * i], 4);
                out[i] = static_cast<float>(k);
            }
            if (type == DType::f32) std::memcpy(&out[i], &bytes[4 * i], 4);
            if (type == DType::bf16) {
                bf16 b;
                std::memcpy(&b, &bytes[2 * i], 2);
                out[i] = to_float(b);
            }
        }
        return out;
    }
    Backend& backend_;
    std::vector<Arena> arenas_;
    std::vector<DType> types_;
};

// What each backend answered: the case's checked buffers after its run.
std::vector<std::vector<float>> run_case(Backend& backend, const OpCase& c, DType activation) {
    const Placed placed(backend, c, activation);
    c.run(backend.kernels(), backend.context(), placed);
    std::vector<std::vector<float>> out;
    for (const Check& check : c.checks)
        out.push_back(placed.read(check.buffer, check.count ? check.count : c.buffers[check.buffer].values.size()));
    return out;
}

// A bf16 output is the device's fp32 result y rounded once, which moves it by at most half a
// bf16 ulp, 2^-8 of |y|. With y within the fp32 tolerance of the CPU's result w, the bf16 output
// is within 2^-8 |w| + (1 + 2^-8) (rel |w| + abs) of w: the fp32 tolerance doubled, plus 2^-8.
Check bf16_tolerance(Check c) {
    c.rel = 1.0 / 256 + 2 * c.rel;
    c.abs = 2 * c.abs;
    return c;
}

// The CPU twin's result as the case's dtype holds it (bf16: rounded once, as the device stores).
std::vector<float> as_activation(const std::vector<float>& v, DType activation, Elem elem) {
    return elem == Elem::act && activation == DType::bf16 ? representable<bf16>(v) : v;
}

void run_twins(const OpCase& c) {
    SCOPED_TRACE(c.name + " (" + std::string(dtype_name(c.activation)) + ")");
    Backend &cpu = cpu_backend(), &gpu = cuda_backend();
    for (Kernel k : c.kernels)
        for (Backend* b : {&cpu, &gpu})
            if (!b->supports(k, b == &cpu ? DType::f32 : c.activation)) {
                std::printf("skipped %s: the %s backend does not support %s\n", c.name.c_str(),
                            device_name(b->device()), kernel_name(k));
                return;
            }
    const auto want = run_case(cpu, c, DType::f32), got = run_case(gpu, c, c.activation);
    for (std::size_t i = 0; i < c.checks.size(); ++i) {
        const Check& check = c.checks[i];
        const Elem elem = c.buffers[check.buffer].elem;
        if (check.bound) {
            EXPECT_TRUE(all_within(got[i], want[i], check.rel, check.bound(want[i]))) << "buffer " << check.buffer;
            continue;
        }
        if (check.rel == 0 && check.abs == 0) {
            EXPECT_TRUE(all_equal_bytes(got[i], as_activation(want[i], c.activation, elem)))
                << "buffer " << check.buffer << " bit for bit";
            continue;
        }
        const Check t = elem == Elem::act && c.activation == DType::bf16 ? bf16_tolerance(check) : check;
        EXPECT_TRUE(all_close(got[i], want[i], t.rel, t.abs)) << "buffer " << check.buffer;
    }
    if (!c.rounds_once || c.activation != DType::bf16) return;
    const auto fp32 = run_case(gpu, c, DType::f32);
    for (std::size_t i = 0; i < c.checks.size(); ++i)
        EXPECT_TRUE(all_equal_bytes(got[i], representable<bf16>(fp32[i])))
            << "buffer " << c.checks[i].buffer << ": not the fp32 result rounded once";
}

// ---- the cases --------------------------------------------------------------------------------

using Dtypes = std::vector<DType>;
const Dtypes kBoth = {DType::f32, DType::bf16};
const long kElementwiseSizes[] = {1, 31, 257, 4099};

// Values the case's dtype holds, uniform in [lo, hi) from `seed`.
Buffer act_values(DType activation, std::size_t n, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
    const std::vector<float> v = random_floats(n, seed, lo, hi);
    return {Elem::act, activation == DType::bf16 ? representable<bf16>(v) : v};
}
Buffer act_zeros(std::size_t n) { return {Elem::act, std::vector<float>(n)}; }
Buffer mask_values(std::size_t n, std::uint64_t seed, float keep) {
    const std::vector<unsigned char> m = random_mask(n, seed, keep);
    return {Elem::u8, std::vector<float>(m.begin(), m.end())};
}
Buffer mask_zeros(std::size_t n) { return {Elem::u8, std::vector<float>(n)}; }
Buffer f32_values(std::size_t n, std::uint64_t seed) { return {Elem::f32, random_floats(n, seed)}; }
// Token ids in [0, V) from `seed`; a small V makes many positions share a row of dwte.
Buffer token_values(std::size_t n, int V, std::uint64_t seed) {
    std::vector<float> u = random_floats(n, seed, 0.0f, static_cast<float>(V));
    for (float& t : u) t = std::min<float>(V - 1, std::floor(t));
    return {Elem::i32, u};
}

std::vector<OpCase> gelu_cases(DType a) {
    // tanhf-based tanh on the device vs the CPU's tanh_approx: absolute error ~1e-7, so relative
    // 1e-5 with a floor of 1e-6.
    const double rel = 1e-5, abs = 1e-6;
    std::vector<OpCase> cases;
    for (long n : kElementwiseSizes) {
        OpCase f = op_case("gelu_forward n=" + std::to_string(n), a, {Kernel::gelu_forward},
                           {act_values(a, n, 1, -6.0f, 6.0f), act_zeros(n)});
        f.run = [n](const KernelTable& k, const KernelContext& ctx, const Placed& p) {
            k.gelu_forward(ctx, p.act(1), p.act(0), n);
        };
        f.checks = {{1, rel, abs}};
        f.rounds_once = true;
        cases.push_back(f);
        // In place (dinp == dout), as the driver runs it.
        OpCase b = op_case("gelu_backward in place n=" + std::to_string(n), a, {Kernel::gelu_backward},
                           {act_values(a, n, 1, -6.0f, 6.0f), act_values(a, n, 2)});
        b.run = [n](const KernelTable& k, const KernelContext& ctx, const Placed& p) {
            k.gelu_backward(ctx, p.act(1), p.act(0), p.act(1), n);
        };
        b.checks = {{1, rel, abs}};
        b.rounds_once = true;
        cases.push_back(b);
    }
    return cases;
}

// The masks come from the same counter-based RNG (kernels/rng.h, compiled for the device too):
// the CPU's bit for bit.
std::vector<OpCase> dropout_mask_cases(DType a) {
    std::vector<OpCase> cases;
    if (a != DType::f32) return cases;  // masks are bytes in every dtype
    for (long n : {1L, 31L, 257L, 100003L})
        for (float p : {0.0f, 0.1f, 0.5f}) {
            const unsigned long long key = rng_key(42, 7, 1, 3, static_cast<std::uint64_t>(n));
            OpCase c = op_case("dropout_mask n=" + std::to_string(n) + " p=" + std::to_string(p), a,
                               {Kernel::dropout_mask}, {mask_zeros(n)});
            c.run = [n, p, key](const KernelTable& k, const KernelContext& ctx, const Placed& pl) {
                k.dropout_mask(ctx, pl.u8(0), n, p, key);
            };
            c.checks = {{0}};
            cases.push_back(c);
        }
    return cases;
}

// Scaled and residual outputs are one rounded operation per element, the CPU's too (bit for bit),
// except residual + masked branch: see residual_dropout_forward_with_mask below.
std::vector<OpCase> residual_dropout_cases(DType a) {
    std::vector<OpCase> cases;
    for (long n : kElementwiseSizes) {
        const std::string size = " n=" + std::to_string(n);
        OpCase plain = op_case("residual_dropout_forward no mask" + size, a, {Kernel::residual_dropout_forward},
                               {act_values(a, n, 1), act_values(a, n, 2), act_zeros(n)});
        plain.run = [n](const KernelTable& k, const KernelContext& ctx, const Placed& p) {
            k.residual_dropout_forward(ctx, p.act(2), p.act(0), p.act(1), nullptr, 0.1f, n);
        };
        plain.checks = {{2}};
        plain.rounds_once = true;
        cases.push_back(plain);
        // The CPU twin's vectorised loop rounds residual + round(inp * scale) twice, but GCC fuses
        // the scalar remainder of each thread's chunk into one FMA: an ulp of the result
        // (relative 2.4e-7) plus an ulp of the product where they cancel (|inp * scale| < 1.2:
        // 1.2e-7).
        OpCase masked = op_case("residual_dropout_forward mask" + size, a, {Kernel::residual_dropout_forward},
                                {act_values(a, n, 1), act_values(a, n, 2), mask_values(n, 3, 0.9f), act_zeros(n)});
        masked.run = [n](const KernelTable& k, const KernelContext& ctx, const Placed& p) {
            k.residual_dropout_forward(ctx, p.act(3), p.act(0), p.act(1), p.u8(2), 0.1f, n);
        };
        masked.checks = {{3, 2.4e-7, 1.2e-7}};
        masked.rounds_once = true;
        cases.push_back(masked);
        for (bool with_mask : {false, true}) {
            OpCase b = op_case(std::string("residual_dropout_backward ") + (with_mask ? "mask" : "no mask") + size, a,
                               {Kernel::residual_dropout_backward},
                               {act_values(a, n, 4), mask_values(n, 5, 0.75f), act_zeros(n)});
            b.run = [n, with_mask](const KernelTable& k, const KernelContext& ctx, const Placed& p) {
                k.residual_dropout_backward(ctx, p.act(2), p.act(0), with_mask ? p.u8(1) : nullptr, 0.25f, n);
            };
            b.checks = {{2}};
            b.rounds_once = true;
            cases.push_back(b);
        }
        OpCase d = op_case("dropout_forward" + size, a, {Kernel::dropout_forward},
                           {act_values(a, n, 6), mask_values(n, 7, 0.9f), act_zeros(n)});
        d.run = [n](const KernelTable& k, const KernelContext& ctx, const Placed& p) {
            k.dropout_forward(ctx, p.act(2), p.act(0), p.u8(1), 0.1f, n);
        };
        d.checks = {{2}};
        d.rounds_once = true;
        cases.push_back(d);
        // In place, as the embeddings' dropout runs.
        OpCase in_place = op_case("dropout_forward in place" + size, a, {Kernel::dropout_forward},
                                  {act_values(a, n, 6), mask_values(n, 7, 0.9f)});
        in_place.run = [n](const KernelTable& k, const KernelContext& ctx, const Placed& p) {
            k.dropout_forward(ctx, p.act(0), p.act(0), p.u8(1), 0.1f, n);
        };
        in_place.checks = {{0}};
        in_place.rounds_once = true;
        cases.push_back(in_place);
    }
    return cases;
}

// Token + position embedding. Both directions are bit-identical to the CPU: the forward is one
// addition per element (in bf16 the CPU's sum rounded once), and the backward adds the same
// values in the same order (positions in increasing b*T+t for every (row, channel) of dwte,
// increasing b for dwpe) into fp32 gradients that start nonzero (it accumulates).
struct EncoderShape {
    int B, T, C, V;
    bool one_token = false;         // every position on token 4: one run of B*T positions, other rows untouched
    std::size_t scratch_bytes = 0;  // a reduction scratch shrunk to this (0: the backend's)
};

std::string encoder_shape_name(const EncoderShape& s) {
    return " B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " C=" + std::to_string(s.C) +
           " V=" + std::to_string(s.V) + (s.one_token ? " one token" : "") +
           (s.scratch_bytes ? " scratch=" + std::to_string(s.scratch_bytes) : "");
}

OpCase encoder_backward_case(DType a, const EncoderShape& s, const Buffer& tokens) {
    const std::size_t N = static_cast<std::size_t>(s.B) * s.T, C = s.C;
    OpCase b = op_case("encoder_backward" + encoder_shape_name(s), a, {Kernel::encoder_backward},
                       {tokens, act_values(a, N * C, 13), f32_values(s.V * C, 14), f32_values(s.T * C, 15)});
    b.run = [s](const KernelTable& k, const KernelContext& ctx, const Placed& p) {
        KernelContext c = ctx;
        if (s.scratch_bytes) c.reduction_scratch_bytes = s.scratch_bytes;
        k.encoder_backward(c, p.f32(2), p.f32(3), p.act(1), p.i32(0), s.B, s.T, s.C);
    };
    b.checks = {{2}, {3}};
    return b;
}

std::vector<OpCase> encoder_cases(DType a) {
    // T = 1; odd shapes with repeated tokens (V small); channels over two blocks (C = 300 > 256);
    // N = 260 positions: three 128-key sort tiles, runs up to ~10; N = 1100 > 1024 walk blocks,
    // which stride over the sorted positions. A 64 KiB scratch splits 8800 positions into chunks
    // whose sums pass through dwte (two at 12 bytes a position, more with CUB's storage).
    const EncoderShape shapes[] = {
        {1, 1, 40, 5},       {2, 7, 40, 13},  {3, 5, 300, 4},   {2, 1, 72, 101},
        {3, 9, 72, 6, true}, {4, 65, 72, 37}, {2, 550, 40, 50}, {8, 1100, 40, 300, false, 64 << 10}};
    std::vector<OpCase> cases;
    for (const EncoderShape& s : shapes) {
        const std::size_t N = static_cast<std::size_t>(s.B) * s.T, C = s.C;
        const Buffer tokens =
            s.one_token ? Buffer{Elem::i32, std::vector<float>(N, 4.0f)} : token_values(N, s.V, 21 + s.C);
        OpCase f = op_case("encoder_forward" + encoder_shape_name(s), a, {Kernel::encoder_forward},
                           {tokens, act_values(a, s.V * C, 11), act_values(a, s.T * C, 12), act_zeros(N * C)});
        f.run = [s](const KernelTable& k, const KernelContext& ctx, const Placed& p) {
            k.encoder_forward(ctx, p.act(3), p.i32(0), p.act(1), p.act(2), s.B, s.T, s.C);
        };
        f.checks = {{3}};
        cases.push_back(f);
        cases.push_back(encoder_backward_case(a, s, tokens));
    }
    return cases;
}

// ---- rounding, for the derived bounds below ----------------------------------------------------

// u = 2^-24 (fp32's unit roundoff), gamma(n) = n u / (1 - n u): a sum of n products computed in
// fp32 in any order, with or without FMA, is within gamma(n) sum |a_i b_i| of the exact value
// (Higham, Accuracy and Stability of Numerical Algorithms, eq. 3.5), so the CPU's sums (Eigen,
// simd dots, running sums), a GPU's cuBLASLt and the emulated one (the exact sum rounded once) are
// within 2 gamma(n) sum |a_i b_i| of each other. The same in double: u_d = 2^-53. A bf16 store
// rounds to nearest, within 2^-8 of the value (8 significant bits).
constexpr double kU = 1.0 / (1 << 24), kUd = kU / (1 << 29), kBf16Rel = 1.0 / 256;
double gamma(long n) { return n * kU / (1 - n * kU); }
double gamma_d(long n) { return n * kUd / (1 - n * kUd); }
std::vector<float> nans(std::size_t n) { return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()); }
Buffer f32_zeros(std::size_t n) { return {Elem::f32, std::vector<float>(n)}; }
Buffer f32_nans(std::size_t n) { return {Elem::f32, nans(n)}; }
Buffer act_nans(std::size_t n) { return {Elem::act, nans(n)}; }
// A bound that does not depend on the CPU's result (it was derived from the inputs alone).
std::function<std::vector<double>(const std::vector<float>&)> fixed(std::vector<double> bound) {
    return [bound = std::move(bound)](const std::vector<float>&) { return bound; };
}

// LayerNorm (kernels/cpu/layernorm.cpp, kernels/cuda/layernorm.cu): the same formulas in other
// summation orders (a warp's butterfly vs the CPU's SIMD lanes; dweight / dbias summed per row group
// then over groups vs row by row), so the results agree to fp32 rounding, not bits. Row statistics
// and outputs: a few ulp of relative error, with an absolute floor for elements near zero (out =
// norm * weight + bias cancels; the mean of an offset row is ~0.5 but of differences ~1e-7
// absolute). dweight / dbias sum N rows in another order: the error grows with the partial sums,
// ~sqrt(N) here, so their floor is a few ulp of those (N <= 300). In bf16 the statistics and the
// parameters' gradients stay fp32, computed from the same values as the CPU's: the fp32 tolerance.
std::vector<OpCase> layernorm_cases(DType a) {
    constexpr double kRel = 1e-5, kAbs = 1e-6, kParamAbs = 1e-5;
    std::vector<OpCase> cases;
    auto inputs = [a](int N, int C, std::uint64_t seed) {  // x (mean ~0.5, not 0), weight, bias
        return std::vector<Buffer>{act_values(a, static_cast<std::size_t>(N) * C, seed, -1.0f, 2.0f),
                                   act_values(a, C, seed + 1, 0.5f, 1.5f), act_values(a, C, seed + 2, -0.5f, 0.5f)};
    };
    // One row, odd widths, rows over several blocks (8 per block), C not a multiple of 32.
    for (const auto& [N, C] : {std::pair{1, 40}, std::pair{14, 72}, std::pair{37, 300}, std::pair{3, 768}}) {
        const std::size_t n = static_cast<std::size_t>(N) * C;
        std::vector<Buffer> buffers = inputs(N, C, 100 + C);
        for (Buffer b : {act_zeros(n), f32_zeros(N), f32_zeros(N)}) buffers.push_back(b);
        OpCase f = op_case("layernorm_forward N=" + std::to_string(N) + " C=" + std::to_string(C), a,
                           {Kernel::layernorm_forward}, buffers);
        f.run = [N = N, C = C](const KernelTable& k, const KernelContext& ctx, const Placed& p) {
            k.layernorm_forward(ctx, p.act(3), p.f32(4), p.f32(5), p.act(0), p.act(1), p.act(2), N, C);
        };
        f.checks = {{3, kRel, kAbs}, {4, kRel, kAbs}, {5, kRel, 0}};
        cases.push_back(f);
    }
    // The residual addition fused with the layernorm of its sum. Inputs on a grid of 2^-5 (residual
    // in [-1, 2), branch in [-1, 1), the branch's dropout scale 2 at p = 0.5) make every sum a
    // multiple of 2^-5 below 4 in magnitude, 8 significant bits: exact in fp32 and bf16, so the CPU
    // twin's fp32 sum is what the device stores and layernorms (the sum is compared bit for bit) and
    // the layernorm's tolerances are layernorm_forward's. That the device layernorms its rounded sum
    // in general is tested against its own two kernels (tests/cuda/test_cuda_layernorm.cpp). C = 2000:
    // the fp32 rows too wide for registers.
    auto on_grid = [](std::size_t n, std::uint64_t seed, float lo, float hi) {
        std::vector<float> v = random_floats(n, seed, lo, hi);
        for (float& x : v) x = std::floor(x * 32.0f) / 32.0f;
        return Buffer{Elem::act, v};
    };
    for (const auto& [N, C] : {std::pair{1, 40}, std::pair{14, 72}, std::pair{37, 300}, std::pair{3, 2000}})
        for (bool with_mask : {false, true}) {
            const std::size_t n = static_cast<std::size_t>(N) * C;
            // Outputs NaN-filled first: every element must be written.
            OpCase f =
                op_case("residual_layernorm_forward N=" + std::to_string(N) + " C=" + std::to_string(C) +
                            (with_mask ? " mask" : " no mask"),
                        a, {Kernel::residual_layernorm_forward},
                        {on_grid(n, 160 + C, -1.0f, 2.0f), on_grid(n, 170 + C, -1.0f, 1.0f),
                         mask_values(n, 180 + C, 0.5f), act_values(a, C, 190 + C, 0.5f, 1.5f),
                         act_values(a, C, 200 + C, -0.5f, 0.5f), act_nans(n), act_nans(n), f32_nans(N), f32_nans(N)});
            f.run = [N = N, C = C, with_mask](const KernelTable& k, const KernelContext& ctx, const Placed& p) {
                // Buffers: 0 residual, 1 branch, 2 mask, 3 weight, 4 bias, 5 sum, 6 out, 7 mean, 8 rstd.
                k.residual_layernorm_forward(ctx, p.act(5), p.act(6), p.f32(7), p.f32(8), p.act(0), p.act(1),
                                             with_mask ? p.u8(2) : nullptr, 0.5f, p.act(3), p.act(4), N, C);
            };
            f.checks = {{5}, {6, kRel, kAbs}, {7, kRel, kAbs}, {8, kRel, 0}};
            cases.push_back(f);
        }
    // Backward from the CPU's saved statistics (so both start from the same mean and rstd), with
    // nonzero dinp, dweight, dbias: all three accumulate. One row; odd widths; 300 rows = 10 row
    // groups of 32 (the last short) over 4-warp blocks; 16 KB of shared memory per warp (C = 2000:
    // 3 warps per block) and 48000 bytes (C = 6000: one warp); and a reduction scratch shrunk to 3
    // groups of 2 * 40 floats, so 300 rows become 3 groups of 100 (the CPU ignores it). The widths
    // take every row path of the kernel: rows held in registers in 2, 4 and 8 steps of 32 packs
    // (C <= 100; 300, 500; 768, 1024 in fp32. C <= 500; 768, 1024; 2000 in bf16, 768 being GPT-2
    // small's) and the two-pass fallback (C = 2000, 6000 in fp32; 6000 in bf16).
    struct Shape {
        int N, C;
        std::size_t scratch_bytes;
    };
    for (const Shape& s :
         {Shape{1, 40, 0}, Shape{14, 72, 0}, Shape{300, 100, 0}, Shape{6, 300, 0}, Shape{6, 500, 0}, Shape{5, 768, 0},
          Shape{4, 1024, 0}, Shape{5, 2000, 0}, Shape{3, 6000, 0}, Shape{300, 40, 3 * 2 * 40 * sizeof(float)}}) {
        const std::size_t n = static_cast<std::size_t>(s.N) * s.C;
        std::vector<Buffer> buffers = inputs(s.N, s.C, 200 + s.C);
        std::vector<float> out(n), mean(s.N), rstd(s.N);
        cpu::layernorm_forward(cpu::default_context(), out.data(), mean.data(), rstd.data(), buffers[0].values.data(),
                               buffers[1].values.data(), buffers[2].values.data(), s.N, s.C);
        buffers[2] = {Elem::f32, mean};
        for (Buffer b : {Buffer{Elem::f32, rstd}, act_values(a, n, 7), act_values(a, n, 8), f32_values(s.C, 9),
                         f32_values(s.C, 10)})
            buffers.push_back(b);
        OpCase b = op_case("layernorm_backward N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) +
                               (s.scratch_bytes ? " scratch=" + std::to_string(s.scratch_bytes) : ""),
                           a, {Kernel::layernorm_backward}, buffers);
        b.run = [s](const KernelTable& k, const KernelContext& ctx, const Placed& p) {
            KernelContext c = ctx;
            if (s.scratch_bytes) c.reduction_scratch_bytes = s.scratch_bytes;
            // Buffers: 0 x, 1 weight, 2 mean, 3 rstd, 4 dout, 5 dinp, 6 dweight, 7 dbias.
            k.layernorm_backward(c, p.act(5), p.f32(6), p.f32(7), p.act(4), p.act(0), p.act(1), p.f32(2), p.f32(3), s.N,
                                 s.C);
        };
        b.checks = {{5, kRel, kAbs}, {6, kRel, kParamAbs}, {7, kRel, kParamAbs}};
        cases.push_back(b);
    }
    return cases;
}

// sum_k |a[i, k]| |b[k, j]| for row-major a (rows x inner) and b (inner x cols) given by strides.
std::vector<double> abs_product(const std::vector<float>& a, long a_row, long a_inner, const std::vector<float>& b,
                                long b_inner, long b_col, int rows, int inner, int cols) {
    std::vector<double> out(static_cast<std::size_t>(rows) * cols, 0.0);
    for (int i = 0; i < rows; ++i)
        for (int k = 0; k < inner; ++k) {
            const double ak = std::fabs(a[i * a_row + k * a_inner]);
            for (int j = 0; j < cols; ++j)
                out[static_cast<std::size_t>(i) * cols + j] += ak * std::fabs(b[k * b_inner + j * b_col]);
        }
    return out;
}

// Both sides within gamma(n) mag of the exact sum of n terms (mag: the sum of their magnitudes):
// 2 gamma(n) mag apart in fp32. A bf16 result is the device's fp32 value v rounded once more,
// 2^-8 |v| <= 2^-8 (|want| + 2 gamma(n) mag): rel 2^-8 and the absolute part scaled by 1 + 2^-8.
std::vector<double> order_bound(const std::vector<double>& mag, long n, double rel_e) {
    std::vector<double> abs(mag.size());
    for (std::size_t i = 0; i < mag.size(); ++i) abs[i] = (1 + rel_e) * 2 * gamma(n) * mag[i];
    return abs;
}

// Linear layers (kernels/cpu/matmul.cpp: Eigen; kernels/cuda/matmul.cu: cuBLASLt and a bias-gradient
// kernel), inputs representable in the case's dtype, outputs NaN-filled first (every element must be
// written; a null dinp or dbias leaves its buffer's NaNs, compared bit for bit). No rows (N = 0:
// backward's overwritten gradients are zeros, its accumulated ones unchanged), T = 1 (N = 1), odd
// sizes, and N = 300 rows: the bias gradient's 2 row groups of 150, each lane's last batch of rows
// in flight partial; OC = 101 (no whole 16-byte packs) and OC = 600 (whole packs, several column
// tiles of 32 packs, the last one partial); and a reduction scratch shrunk to 2 rows of partials,
// so that N = 600 rows make 2 groups of 300, not 3 of 256 (the CPU ignores it).
std::vector<OpCase> matmul_cases(DType a) {
    struct Shape {
        int N, C, OC;
        std::size_t scratch_bytes = 0;
    };
    const Shape shapes[] = {{0, 40, 101},
                            {1, 40, 101},
                            {14, 72, 101},
                            {14, 40, 120},
                            {300, 72, 101},
                            {300, 40, 600},
                            {600, 40, 101, 2 * 101 * sizeof(float)}};
    const double rel_e = a == DType::bf16 ? kBf16Rel : 0.0;  // the device's bf16 store
    std::vector<OpCase> cases;
    for (const Shape& s : shapes) {
        const std::size_t nx = static_cast<std::size_t>(s.N) * s.C, nw = static_cast<std::size_t>(s.OC) * s.C,
                          ny = static_cast<std::size_t>(s.N) * s.OC;
        const std::string shape = " N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) +
                                  " OC=" + std::to_string(s.OC) +
                                  (s.scratch_bytes ? " scratch=" + std::to_string(s.scratch_bytes) : "");
        const Buffer x = act_values(a, nx, 1), w = act_values(a, nw, 2), bias = act_values(a, s.OC, 3),
                     dy = act_values(a, ny, 4);
        // Forward: C products and the bias. A bf16 output with a bias may be rounded before the bias
        // is added, as cuBLASLt's epilogue does on an H200 (CUDA 13): one more 2^-8 of x w^T, whose
        // size is at most mag.
        for (bool with_bias : {true, false}) {
            OpCase f = op_case("matmul_forward" + shape + (with_bias ? " bias" : " no bias"), a,
                               {Kernel::matmul_forward}, {x, w, bias, act_nans(ny)});
            f.run = [s, with_bias](const KernelTable& k, const KernelContext& ctx, const Placed& p) {
                k.matmul_forward(ctx, p.act(3), p.act(0), p.act(1), with_bias ? ConstAct(p.act(2)) : nullptr, s.N, s.C,
                                 s.OC);
            };
            std::vector<double> mag = abs_product(x.values, s.C, 1, w.values, 1, s.C, s.N, s.C, s.OC);  // x w^T
            if (with_bias)
                for (std::size_t i = 0; i < mag.size(); ++i) mag[i] += std::fabs(bias.values[i % s.OC]);
            std::vector<double> bound = order_bound(mag, s.C + 1, rel_e);
            if (with_bias)
                for (std::size_t i = 0; i < bound.size(); ++i) bound[i] += rel_e * mag[i];
            f.checks = {{3, rel_e, 0, fixed(bound)}};
            cases.push_back(f);
        }
        // Backward: dinp = dy w (OC products, then the store), dweight = dy^T x and dbias = sum dy (fp32
        // sums of N terms and, when accumulating, the value they are added to), into gradients that
        // hold a micro-batch's sum (accumulate) or NaNs (overwritten).
        const std::vector<float> dw0 = random_floats(nw, 5), db0 = random_floats(s.OC, 6);
        const std::vector<double> dx_mag = abs_product(dy.values, s.OC, 1, w.values, s.C, 1, s.N, s.OC, s.C),
                                  dw_mag = abs_product(dy.values, 1, s.OC, x.values, s.C, 1, s.OC, s.N, s.C);
        std::vector<double> db_mag(s.OC, 0.0);
        for (std::size_t i = 0; i < ny; ++i) db_mag[i % s.OC] += std::fabs(dy.values[i]);
        for (bool accumulate : {false, true})
            for (bool with_dinp : {true, false})
                for (bool with_dbias : {true, false}) {
                    OpCase b =
                        op_case("matmul_backward" + shape + " accumulate=" + std::to_string(accumulate) +
                                    " dinp=" + std::to_string(with_dinp) + " dbias=" + std::to_string(with_dbias),
                                a, {Kernel::matmul_backward},
                                {x,
                                 w,
                                 dy,
                                 act_nans(nx),
                                 {Elem::f32, accumulate ? dw0 : nans(nw)},
                                 {Elem::f32, accumulate ? db0 : nans(s.OC)}});
                    b.run = [s, accumulate, with_dinp, with_dbias](const KernelTable& k, const KernelContext& ctx,
                                                                   const Placed& p) {
                        KernelContext c = ctx;
                        if (s.scratch_bytes) c.reduction_scratch_bytes = s.scratch_bytes;
                        k.matmul_backward(c, with_dinp ? p.act(3) : nullptr, p.f32(4), with_dbias ? p.f32(5) : nullptr,
                                          p.act(2), p.act(0), p.act(1), s.N, s.C, s.OC, accumulate);
                    };
                    if (with_dinp)
                        b.checks.push_back({3, rel_e, 0, fixed(order_bound(dx_mag, s.OC, rel_e))});
                    else
                        b.checks.push_back({3});
                    std::vector<double> mag = dw_mag;
                    if (accumulate)
                        for (std::size_t i = 0; i < nw; ++i) mag[i] += std::fabs(dw0[i]);
                    b.checks.push_back({4, 0, 0, fixed(order_bound(mag, s.N + 1, 0.0))});
                    if (with_dbias) {
                        mag = db_mag;
                        if (accumulate)
                            for (int i = 0; i < s.OC; ++i) mag[i] += std::fabs(db0[i]);
                        b.checks.push_back({5, 0, 0, fixed(order_bound(mag, s.N + 1, 0.0))});
                    } else {
                        b.checks.push_back({5});
                    }
                    cases.push_back(b);
                }
    }
    return cases;
}

// The MLP's matmuls with GELU in the epilogue (kernels/cpu/matmul.cpp: matmul then the GELU
// kernels; kernels/cuda/matmul.cu: cuBLASLt's GELU_AUX_BIAS and DGELU), the GELU's width a
// multiple of kGeluEpilogueColumns. The bounds are matmul_cases' for the product, carried through
// the GELU: |gelu(u) - gelu(v)| <= kGeluSlope |u - v|, with kGeluSlope >= sup |gelu'| (1.1289, at
// x ~ 1.5, for the tanh form). The GELU's own evaluation (the device's exp, or cuBLASLt's own, vs
// the CPU's exp_approx) adds gelu_cases' rel 1e-5 and abs 1e-6 (per unit of the gradient it scales,
// backward: times the product's magnitude). In bf16 the device rounds once more on store (rel
// 2^-8), and may round the product before the epilogue's step, as the BIAS epilogue does on an H200
// (one more 2^-8 of the product's magnitude, times kGeluSlope after the GELU).
constexpr double kGeluSlope = 1.13;
std::vector<OpCase> matmul_gelu_cases(DType a) {
    struct Shape {
        int N, C, OC;
    };
    const double rel_e = a == DType::bf16 ? kBf16Rel : 0.0, rel_gelu = 1e-5, abs_gelu = 1e-6;
    std::vector<OpCase> cases;
    // Forward: OC (the GELU's width) a multiple of 8; N = 1, odd C, 300 rows.
    for (const Shape& s : {Shape{1, 40, 104}, Shape{14, 72, 120}, Shape{300, 37, 104}}) {
        const std::size_t nx = static_cast<std::size_t>(s.N) * s.C, nw = static_cast<std::size_t>(s.OC) * s.C,
                          ny = static_cast<std::size_t>(s.N) * s.OC;
        const std::string shape =
            " N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) + " OC=" + std::to_string(s.OC);
        // Products up to ~C/4 in size: the GELU's curved part and both tails are reached.
        const Buffer x = act_values(a, nx, 11, -2.0f, 2.0f), w = act_values(a, nw, 12), bias = act_values(a, s.OC, 13);
        for (bool with_bias : {true, false}) {
            OpCase f = op_case("matmul_gelu_forward" + shape + (with_bias ? " bias" : " no bias"), a,
                               {Kernel::matmul_gelu_forward}, {x, w, bias, act_nans(ny), act_nans(ny)});
            f.run = [s, with_bias](const KernelTable& k, const KernelContext& ctx, const Placed& p) {
                k.matmul_gelu_forward(ctx, p.act(3), p.act(4), p.act(0), p.act(1),
                                      with_bias ? ConstAct(p.act(2)) : nullptr, s.N, s.C, s.OC);
            };
            std::vector<double> mag = abs_product(x.values, s.C, 1, w.values, 1, s.C, s.N, s.C, s.OC);
            if (with_bias)
                for (std::size_t i = 0; i < mag.size(); ++i) mag[i] += std::fabs(bias.values[i % s.OC]);
            std::vector<double> pre = order_bound(mag, s.C + 1, rel_e), out(ny);
            for (std::size_t i = 0; i < ny; ++i) {
                pre[i] += rel_e * mag[i];
                out[i] = kGeluSlope * pre[i] + abs_gelu;
            }
            f.checks = {{4, rel_e, 0, fixed(pre)}, {3, rel_e + rel_gelu, 0, fixed(out)}};
            cases.push_back(f);
        }
    }
    // Backward: C (the GELU's width) a multiple of 8, OC any; pre over the GELU's range.
    for (const Shape& s : {Shape{1, 104, 40}, Shape{14, 120, 72}, Shape{300, 104, 101}}) {
        const std::size_t nx = static_cast<std::size_t>(s.N) * s.C, nw = static_cast<std::size_t>(s.OC) * s.C,
                          ny = static_cast<std::size_t>(s.N) * s.OC;
        const std::string shape =
            " N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) + " OC=" + std::to_string(s.OC);
        const Buffer x = act_values(a, nx, 21), pre = act_values(a, nx, 22, -6.0f, 6.0f), w = act_values(a, nw, 23),
                     dy = act_values(a, ny, 24);
        const std::vector<float> dw0 = random_floats(nw, 25), db0 = random_floats(s.OC, 26);
        const std::vector<double> dx_mag = abs_product(dy.values, s.OC, 1, w.values, s.C, 1, s.N, s.OC, s.C),
                                  dw_mag = abs_product(dy.values, 1, s.OC, x.values, s.C, 1, s.OC, s.N, s.C);
        std::vector<double> db_mag(s.OC, 0.0);
        for (std::size_t i = 0; i < ny; ++i) db_mag[i % s.OC] += std::fabs(dy.values[i]);
        std::vector<double> dpre = order_bound(dx_mag, s.OC, rel_e);
        for (std::size_t i = 0; i < nx; ++i)
            dpre[i] = kGeluSlope * (dpre[i] + rel_e * dx_mag[i]) + abs_gelu * dx_mag[i];
        for (bool accumulate : {false, true}) {
            OpCase b = op_case("matmul_dgelu_backward" + shape + " accumulate=" + std::to_string(accumulate), a,
                               {Kernel::matmul_dgelu_backward},
                               {x,
                                pre,
                                w,
                                dy,
                                act_nans(nx),
                                {Elem::f32, accumulate ? dw0 : nans(nw)},
                                {Elem::f32, accumulate ? db0 : nans(s.OC)}});
            b.run = [s, accumulate](const KernelTable& k, const KernelContext& ctx, const Placed& p) {
                k.matmul_dgelu_backward(ctx, p.act(4), p.f32(5), p.f32(6), p.act(3), p.act(0), p.act(1), p.act(2), s.N,
                                        s.C, s.OC, accumulate);
            };
            std::vector<double> wmag = dw_mag, bmag = db_mag;
            if (accumulate) {
                for (std::size_t i = 0; i < nw; ++i) wmag[i] += std::fabs(dw0[i]);
                for (int i = 0; i < s.OC; ++i) bmag[i] += std::fabs(db0[i]);
            }
            b.checks = {{4, rel_e + rel_gelu, 0, fixed(dpre)},
                        {5, 0, 0, fixed(order_bound(wmag, s.N + 1, 0.0))},
                        {6, 0, 0, fixed(order_bound(bmag, s.N + 1, 0.0))}};
            cases.push_back(b);
        }
    }
    return cases;
}

// Causal self-attention's index arithmetic: q of (b, t, h) at q (k at + C, v at + 2C), atty at y,
// row t of att for (b, h) at att, and a loop over every (b, h, t).
struct Heads {
    int B, T, C, NH, hs;
    Heads(int B_, int T_, int C_, int NH_) : B(B_), T(T_), C(C_), NH(NH_), hs(C_ / NH_) {}
    std::size_t N() const { return static_cast<std::size_t>(B) * T; }
    std::size_t n_att() const { return static_cast<std::size_t>(B) * NH * T * T; }
    std::size_t q(int b, int t, int h) const { return (static_cast<std::size_t>(b) * T + t) * 3 * C + h * hs; }
    std::size_t y(int b, int t, int h) const { return (static_cast<std::size_t>(b) * T + t) * C + h * hs; }
    std::size_t att(int b, int h, int t) const { return ((static_cast<std::size_t>(b) * NH + h) * T + t) * T; }
    template <typename F>
    void rows(F&& f) const {
        for (int b = 0; b < B; ++b)
            for (int h = 0; h < NH; ++h)
                for (int t = 0; t < T; ++t) f(b, h, t);
    }
    std::string name() const {
        return " B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) +
               " NH=" + std::to_string(NH);
    }
};

// The materialized attention (kernels/cpu/attention.cpp; kernels/cuda/attention.cu: cuBLASLt GEMMs
// and row kernels), the four kernels one by one, each fed the CPU's inputs (so a difference is that
// kernel's; in bf16 rounded to bf16 first, so both read the same values), with and without a
// dropout mask, every output buffer compared whole: att and datt including their zero upper
// triangles (bound 0 there), dqkv including the columns the kernel must leave alone (bound 0).
// exp: the CPU's exp_approx is within 4.2u (tests/test_kernels.cpp, VectorMath), CUDA's expf
// within 2 ulp (CUDA C Programming Guide), <= 4u, and the emulation's host expf within 1 ulp: 5u
// covers them. A device result rounded to bf16 r times after its fp32 computation, against the
// CPU's fp32, each within `each` of the exact value: got = v (1 + f), |f| <= (1 + 2^-8)^r - 1 =
// rel, so |got - want| <= rel |want| + (1 + rel) 2 each.
// hs = 24 and 20; T = 1; B <= NH (one GEMM per batch, heads batched) and B > NH (one per head);
// T = 33, 40 and 69: several 32-row tiles and row-softmax blocks; hs = 80: several 32-channel
// tiles (the dropout products), one head.
constexpr double kExpRel = 5 * kU;
std::vector<OpCase> attention_cases(DType a) {
    const bool bf16 = a == DType::bf16;
    auto rel_of = [bf16](int roundings) { return bf16 ? std::pow(1 + kBf16Rel, roundings) - 1 : 0.0; };
    auto scale_bound = [](std::vector<double>& each, double rel) {
        for (double& e : each) e *= 2 * (1 + rel);
    };
    const Heads shapes[] = {{2, 7, 72, 3},  {2, 1, 40, 2},  {1, 7, 40, 2}, {3, 5, 40, 2},
                            {4, 33, 40, 2}, {2, 69, 72, 3}, {1, 40, 80, 1}};
    std::vector<OpCase> cases;
    for (const Heads& g : shapes) {
        const int B = g.B, T = g.T, C = g.C, NH = g.NH, hs = g.hs;
        const std::size_t N = g.N(), n_qkv = N * 3 * C, n_y = N * C, n_att = g.n_att();
        const Buffer qkv = act_values(a, n_qkv, 1, -2.0f, 2.0f);
        const std::vector<float>& q = qkv.values;
        const float scale = 1.0f / std::sqrt(static_cast<float>(hs));

        // Softmax forward: the whole of att (NaN-filled first) written. Scores s_j = scale q.k_j are
        // within sigma_j = gamma(hs + 1) scale sum |q k_j| on each side (the device's then rounded to
        // bf16: + 2^-8 (|s_j| + sigma_j)); the softmax of scores off by at most D is off by a factor
        // e^(+-2D). Each exponential is within kExpRel and its argument's rounding, u R (R the row's
        // score range); the row sum of t + 1 positive terms within gamma(t + 1); 1/sum and the
        // product round once each; the device's output rounds to bf16. So each side's p_j = P_j
        // (1 + rho), and |got - want| <= (rho_cpu + rho_dev) want / (1 - rho_cpu).
        OpCase sf = op_case("attention_softmax_forward" + g.name(), a, {Kernel::attention_softmax_forward},
                            {qkv, act_nans(n_att)});
        sf.run = [g](const KernelTable& k, const KernelContext& ctx, const Placed& p) {
            k.attention_softmax_forward(ctx, p.act(1), p.act(0), g.B, g.T, g.C, g.NH);
        };
        sf.checks = {{1, 0, 0, [g, q, scale, bf16, rel_of](const std::vector<float>& att) {
                          std::vector<double> limit(att.size(), 0.0);
                          g.rows([&](int b, int h, int t) {
                              double d_cpu = 0, d_dev = 0, s_max = 0;
                              for (int j = 0; j <= t; ++j) {
                                  const float *qt = &q[g.q(b, t, h)], *kj = &q[g.q(b, j, h) + g.C];
                                  double s = 0, m = 0;
                                  for (int i = 0; i < g.hs; ++i)
                                      s += double(qt[i]) * kj[i], m += std::fabs(double(qt[i]) * kj[i]);
                                  s *= scale, m *= scale;
                                  const double sigma = gamma(g.hs + 1) * m;
                                  d_cpu = std::max(d_cpu, sigma);
                                  d_dev = std::max(d_dev, sigma + (bf16 ? kBf16Rel * (std::fabs(s) + sigma) : 0.0));
                                  s_max = std::max(s_max, std::fabs(s));
                              }
                              auto rho = [&](double d, double out_rel) {
                                  const double eta = (1 + kExpRel) * std::exp(kU * 2 * (s_max + d)) - 1;
                                  return std::exp(2 * d) * (1 + eta) * (1 + kU) * (1 + kU) /
                                             ((1 - eta) * (1 - gamma(t + 1))) * (1 + out_rel) -
                                         1;
                              };
                              const double rho_cpu = rho(d_cpu, 0.0), rho_dev = rho(d_dev, rel_of(1));
                              for (int j = 0; j <= t; ++j) {
                                  const std::size_t at = g.att(b, h, t) + j;
                                  limit[at] = (rho_cpu + rho_dev) * att[at] / (1 - rho_cpu);
                              }
                          });
                          return limit;
                      }}};
        cases.push_back(sf);

        // The CPU's probabilities, as the case's dtype holds them: the next kernels' input.
        std::vector<float> att_cpu(n_att);
        cpu::attention_softmax_forward(cpu::default_context(), att_cpu.data(), q.data(), B, T, C, NH);
        const Buffer att = {Elem::act, as_activation(att_cpu, a, Elem::act)};
        const Buffer dy = act_values(a, n_y, 3), dqkv0 = act_values(a, n_qkv, 4);
        for (bool dropout : {false, true}) {
            const std::string name = g.name() + (dropout ? " dropout" : "");
            const float drop_p = dropout ? 0.1f : 0.0f, keep_f = 1.0f / (1.0f - drop_p);
            const std::vector<unsigned char> mask_bytes = random_mask(dropout ? n_att : 1, 2, 1.0f - drop_p);
            const Buffer mask = {Elem::u8, std::vector<float>(mask_bytes.begin(), mask_bytes.end())};
            auto keep = [&](std::size_t idx) { return dropout ? (mask_bytes[idx] != 0 ? double(keep_f) : 0.0) : 1.0; };

            // Value forward: y = sum_j (att_j keep_j) v_j, T products (and the dropout product) on
            // each side, then rounded to bf16 once.
            OpCase vf = op_case("attention_value_forward" + name, a, {Kernel::attention_value_forward},
                                {qkv, att, mask, act_nans(n_y)});
            vf.run = [g, dropout, drop_p](const KernelTable& k, const KernelContext& ctx, const Placed& p) {
                k.attention_value_forward(ctx, p.act(3), p.act(1), dropout ? p.u8(2) : nullptr, drop_p, p.act(0), g.B,
                                          g.T, g.C, g.NH);
            };
            std::vector<double> y_limit(n_y, 0.0);
            g.rows([&](int b, int h, int t) {
                for (int j = 0; j <= t; ++j) {
                    const double w = std::fabs(att.values[g.att(b, h, t) + j]) * keep(g.att(b, h, t) + j);
                    for (int i = 0; i < hs; ++i)
                        y_limit[g.y(b, t, h) + i] += w * std::fabs(q[g.q(b, j, h) + 2 * C + i]);
                }
            });
            for (double& l : y_limit) l *= gamma(T + 1);
            scale_bound(y_limit, rel_of(1));
            vf.checks = {{3, rel_of(1), 0, fixed(y_limit)}};
            cases.push_back(vf);

            // Value backward: datt whole, and only the v columns of dqkv (it starts as other values
            // that the q and k columns must keep: bound 0 there). datt_j = keep_j dy.v_j (hs products
            // and the keep product; on the device rounded to bf16 by the GEMM and, with dropout, again
            // after keep); dv_j = sum_t (att_tj keep_tj) dy_t (T products and the dropout product,
            // rounded once).
            OpCase vb = op_case("attention_value_backward" + name, a, {Kernel::attention_value_backward},
                                {qkv, att, mask, dy, act_nans(n_att), dqkv0});
            vb.run = [g, dropout, drop_p](const KernelTable& k, const KernelContext& ctx, const Placed& p) {
                k.attention_value_backward(ctx, p.act(4), p.act(5), p.act(3), p.act(1), dropout ? p.u8(2) : nullptr,
                                           drop_p, p.act(0), g.B, g.T, g.C, g.NH);
            };
            std::vector<double> datt_limit(n_att, 0.0), dv_limit(n_qkv, 0.0);
            g.rows([&](int b, int h, int t) {
                for (int j = 0; j <= t; ++j) {
                    const std::size_t at = g.att(b, h, t) + j;
                    const float *d = &dy.values[g.y(b, t, h)], *v = &q[g.q(b, j, h) + 2 * C];
                    double m = 0;
                    for (int i = 0; i < hs; ++i) m += std::fabs(double(d[i]) * v[i]);
                    datt_limit[at] = gamma(hs + 1) * keep(at) * m;
                    const double w = std::fabs(att.values[at]) * keep(at);
                    for (int i = 0; i < hs; ++i)
                        dv_limit[g.q(b, j, h) + 2 * C + i] += gamma(T + 1) * w * std::fabs(d[i]);
                }
            });
            const double datt_rel = rel_of(dropout ? 2 : 1);
            scale_bound(datt_limit, datt_rel);
            scale_bound(dv_limit, rel_of(1));
            // rel applies only where dv is written (the q and k columns must equal dqkv0 exactly).
            const double dv_rel = rel_of(1);
            vb.checks = {{4, datt_rel, 0, fixed(datt_limit)},
                         {5, 0, 0, [dv_limit, dv_rel, C](const std::vector<float>& dqkv) {
                              std::vector<double> limit = dv_limit;
                              for (std::size_t i = 0; i < limit.size(); ++i)
                                  if (i % (3 * C) >= static_cast<std::size_t>(2 * C))
                                      limit[i] += dv_rel * std::fabs(dqkv[i]);
                              return limit;
                          }}};
            cases.push_back(vb);

            // Softmax backward, from the CPU's datt (as the case's dtype holds it): the q and k columns
            // of dqkv (the v columns keep what they held: bound 0). Per row, W = sum_j a_j da_j within
            // omega = gamma(t + 1) sum |a_j da_j| on each side; z_j = a_j (da_j - W) scale (three
            // roundings) within e_j = a_j scale ((|da_j| + |W|) gamma(3) + omega (1 + gamma(3))), on the
            // device then rounded to bf16 (+ 2^-8 (|z_j| + e_j)); dq = sum_j z_j k_j and dk_j = sum_t
            // z_tj q_t (T products) within sum (e |k| + gamma(T) (|z| + e) |k|) on each side; the
            // device's output rounded to bf16 once.
            std::vector<float> datt_cpu(n_att), dqkv_scratch = dqkv0.values;
            cpu::attention_value_backward(cpu::default_context(), datt_cpu.data(), dqkv_scratch.data(),
                                          dy.values.data(), att.values.data(), dropout ? mask_bytes.data() : nullptr,
                                          drop_p, q.data(), B, T, C, NH);
            const Buffer datt = {Elem::act, as_activation(datt_cpu, a, Elem::act)};
            OpCase sb = op_case("attention_softmax_backward" + name, a, {Kernel::attention_softmax_backward},
                                {qkv, att, datt, dqkv0});
            sb.run = [g](const KernelTable& k, const KernelContext& ctx, const Placed& p) {
                k.attention_softmax_backward(ctx, p.act(3), p.act(2), p.act(1), p.act(0), g.B, g.T, g.C, g.NH);
            };
            std::vector<double> dqk_limit(n_qkv, 0.0);
            const std::vector<float>&av = att.values, &dv = datt.values;
            g.rows([&](int b, int h, int t) {
                const std::size_t row = g.att(b, h, t);
                double w = 0, w_abs = 0;
                for (int j = 0; j <= t; ++j) {
                    w += double(av[row + j]) * dv[row + j];
                    w_abs += std::fabs(double(av[row + j]) * dv[row + j]);
                }
                const double omega = gamma(t + 1) * w_abs;
                for (int j = 0; j <= t; ++j) {
                    const double s = std::fabs(av[row + j]) * scale,
                                 z = std::fabs(av[row + j] * (dv[row + j] - w) * scale);
                    const double e_cpu =
                        s * ((std::fabs(dv[row + j]) + std::fabs(w)) * gamma(3) + omega * (1 + gamma(3)));
                    const double e_dev = e_cpu + (bf16 ? kBf16Rel * (z + e_cpu) : 0.0);
                    // Both sides' bounds on this term of dq (row t, times k_j) and of dk (row j, times q_t).
                    const double term = e_cpu + e_dev + gamma(T) * (2 * z + e_cpu + e_dev);
                    for (int i = 0; i < hs; ++i) {
                        dqk_limit[g.q(b, t, h) + i] += term * std::fabs(q[g.q(b, j, h) + C + i]);
                        dqk_limit[g.q(b, j, h) + C + i] += term * std::fabs(q[g.q(b, t, h) + i]);
                    }
                }
            });
            const double dqk_rel = rel_of(1);
            sb.checks = {{3, 0, 0, [dqk_limit, dqk_rel, C](const std::vector<float>& dqkv) {
                              std::vector<double> limit = dqk_limit;
                              for (std::size_t i = 0; i < limit.size(); ++i)
                                  if (i % (3 * C) < static_cast<std::size_t>(2 * C))
                                      limit[i] = (1 + dqk_rel) * limit[i] + dqk_rel * std::fabs(dqkv[i]);
                              return limit;
                          }}};
            cases.push_back(sb);
        }
    }
    return cases;
}

// Fused attention (kernels/cpu/attention_fused.cpp, kernels/cuda/attention_fused.cu), with and
// without dropout (both draw the same RNG bits from the key): atty, lse and all of dqkv (NaN-filled
// first, so every entry must be written). The two differ in rounding order (the CPU's simd dots,
// CUDA's warp sums) and in exp. Each score s_j = scale q.k_j is within sigma_j = gamma(hs + 1)
// scale sum |q k_j| on both sides (D: the row's largest), and the softmax of scores off by at most
// D is off by a factor e^(+-2D). exp within kExpRel (above); logf within 1 ulp (2u) on all three.
// Each side's bound is computed once and covers both, so two results differ by at most twice it.
// hs = 24, 20, 8, 80 and 64 (GPT-2's; several channels per lane), T = 1, and 19, 17 and 37 rows
// per head (several 8-row blocks; 37 crosses two 16-row shared-memory tiles and ends inside a
// third). Small, because every warp_sum is five scheduler points under emulation.
std::vector<OpCase> attention_fused_cases(DType a) {
    constexpr double kLogRel = 2 * kU;
    const double rel_y = a == DType::bf16 ? kBf16Rel : 0.0;  // the device's store
    const Heads shapes[] = {{2, 7, 72, 3},  {2, 1, 40, 2},  {3, 5, 16, 2},
                            {1, 19, 80, 1}, {2, 17, 16, 2}, {1, 37, 128, 2}};
    std::vector<OpCase> cases;
    for (bool dropout : {false, true})
        for (const Heads& g : shapes) {
            const int B = g.B, T = g.T, C = g.C, NH = g.NH, hs = g.hs;
            const std::string name = g.name() + (dropout ? " dropout" : "");
            const std::size_t N = g.N(), rows = N * NH;
            const float drop_p = dropout ? 0.2f : 0.0f;
            const unsigned long long key = rng_key(3, 1, 4, 1, 5);
            const Buffer qkv = act_values(a, N * 3 * C, 1, -2.0f, 2.0f);
            const std::vector<float>& q = qkv.values;
            // Both sides' float constants and the kernels' dropout factor; the exact scores of a row
            // (sc), their magnitudes' bound (sigma).
            const float scale = 1.0f / std::sqrt(static_cast<float>(hs)), keep_f = 1.0f / (1.0f - drop_p);
            auto keep = [&](std::size_t row, int j) {
                return drop_p <= 0.0f ? 1.0 : rng_uniform(key, row * T + j) >= drop_p ? double(keep_f) : 0.0;
            };
            std::vector<double> sc(T), sigma(T);
            auto scores = [&](int b, int h, int t) {  // the row's D and max |s_j|
                double d = 0, s_max = 0;
                for (int j = 0; j <= t; ++j) {
                    const float *qt = &q[g.q(b, t, h)], *kj = &q[g.q(b, j, h) + C];
                    double v = 0, m = 0;
                    for (int i = 0; i < hs; ++i) v += double(qt[i]) * kj[i], m += std::fabs(double(qt[i]) * kj[i]);
                    sc[j] = scale * v, sigma[j] = gamma(hs + 1) * scale * m;
                    d = std::max(d, sigma[j]), s_max = std::max(s_max, std::fabs(sc[j]));
                }
                return std::pair{d, s_max};
            };

            // Forward, per row: every term of the running sums (l, and y before 1/l) is e^(s^_j - m)
            // keep_j (v_j) times (1 + theta_j): at most T exponentials (its own and the device's
            // rescales, each within kExpRel; their arguments' roundings sum to at most 2u R, R the
            // score range) and 2T + 1 roundings. So y = num / l is within kappa Y of y(s), Y = sum_j
            // P_j keep_j |v_j|, and lse = m + log(l) within D - log(1 - theta) + the log's and the
            // sum's roundings.
            OpCase f = op_case("attention_fused_forward" + name, a, {Kernel::attention_fused_forward},
                               {qkv, act_nans(N * C), f32_nans(rows)});
            f.run = [g, drop_p, key](const KernelTable& k, const KernelContext& ctx, const Placed& p) {
                k.attention_fused_forward(ctx, p.act(1), p.f32(2), p.act(0), g.B, g.T, g.C, g.NH, drop_p, key);
            };
            std::vector<double> y_limit(N * C, 0.0), lse_limit(rows, 0.0);
            g.rows([&](int b, int h, int t) {
                const auto [d, s_max] = scores(b, h, t);
                const long row = (static_cast<long>(b) * NH + h) * T + t;
                const double theta =
                    std::pow(1 + kExpRel, T) * std::exp(2 * kU * 2 * (s_max + d)) * std::pow(1 + kU, 2 * T + 1) - 1;
                const double kappa =
                    std::expm1(2 * d) + std::exp(2 * d) * (2 * theta * (1 + kU) * (1 + kU) / (1 - theta) + gamma(2));
                double m = -INFINITY, l = 0;
                for (int j = 0; j <= t; ++j) m = std::max(m, sc[j]);
                for (int j = 0; j <= t; ++j) l += std::exp(sc[j] - m);
                for (int j = 0; j <= t; ++j) {
                    const double pk = std::exp(sc[j] - m) / l * keep(row, j);
                    for (int i = 0; i < hs; ++i)
                        y_limit[g.y(b, t, h) + i] += kappa * pk * std::fabs(q[g.q(b, j, h) + 2 * C + i]);
                }
                const double log_l = std::max(std::log((t + 1) * (1 + theta)), -std::log(1 - theta));
                const double each = d - std::log(1 - theta) + kLogRel * log_l;
                lse_limit[row] = 2 * (each + kU * (std::fabs(m + std::log(l)) + each));
            });
            for (double& v : y_limit) v *= 2 * (1 + rel_y);
            f.checks = {{1, rel_y, 0, fixed(y_limit)}, {2, 0, 0, fixed(lse_limit)}};
            cases.push_back(f);

            // Backward from the CPU's atty (as the case's dtype holds it) and lse. Exact, given these
            // inputs: P_j = e^(s_j - lse), D = dy.y, dp_j = keep_j dy.v_j, ds_j = P_j (dp_j - D) scale.
            // Each side's p_j is within P_j pi_j (the exp and its argument's error), D within gamma(hs)
            // sum |dy y|, dp_j within gamma(hs + 1) keep_j sum |dy v_j|, ds_j (three more roundings)
            // within e_ds; dq = sum_j ds_j k_j, dk_j = sum_t ds_tj q_t and dv_j = sum_t (p_tj keep_tj)
            // dy_t are sums of T terms, within sum (e + gamma(T + 1) (|term| + e)) |factor|.
            std::vector<float> y(N * C), lse(rows);
            cpu::attention_fused_forward(cpu::default_context(), y.data(), lse.data(), q.data(), B, T, C, NH, drop_p,
                                         key);
            const Buffer yr = {Elem::act, as_activation(y, a, Elem::act)}, dy = act_values(a, N * C, 2);
            OpCase bw = op_case("attention_fused_backward" + name, a, {Kernel::attention_fused_backward},
                                {qkv, dy, yr, {Elem::f32, lse}, act_nans(N * 3 * C)});
            bw.run = [g, drop_p, key](const KernelTable& k, const KernelContext& ctx, const Placed& p) {
                k.attention_fused_backward(ctx, p.act(4), p.act(1), p.act(0), p.act(2), p.f32(3), g.B, g.T, g.C, g.NH,
                                           drop_p, key);
            };
            std::vector<double> limit(N * 3 * C, 0.0);
            g.rows([&](int b, int h, int t) {
                scores(b, h, t);
                const long row = (static_cast<long>(b) * NH + h) * T + t;
                const float *dyt = &dy.values[g.y(b, t, h)], *yt = &yr.values[g.y(b, t, h)], *qt = &q[g.q(b, t, h)];
                double D = 0, D_abs = 0;
                for (int i = 0; i < hs; ++i) D += double(dyt[i]) * yt[i], D_abs += std::fabs(double(dyt[i]) * yt[i]);
                for (int j = 0; j <= t; ++j) {
                    const float *kj = &q[g.q(b, j, h) + C], *vj = kj + C;
                    const double kp = keep(row, j), P = std::exp(sc[j] - lse[row]);
                    double dp = 0, dp_abs = 0;
                    for (int i = 0; i < hs; ++i) {
                        dp += double(dyt[i]) * vj[i];
                        dp_abs += std::fabs(double(dyt[i]) * vj[i]);
                    }
                    const double x = kp * dp - D,
                                 ex = (gamma(hs + 1) * kp * dp_abs + gamma(hs) * D_abs) * (1 + kU) + kU * std::fabs(x);
                    const double arg = sigma[j] + kU * (std::fabs(sc[j] - lse[row]) + sigma[j]);
                    const double pi = (1 + kExpRel) * std::exp(arg) - 1;
                    const double ds = std::fabs(P * x * scale);
                    const double e_ds =
                        scale * P * ((pi * (std::fabs(x) + ex) + ex) * (1 + gamma(2)) + gamma(2) * std::fabs(x));
                    const double e_a = P * kp * (pi + gamma(1) * (1 + pi));
                    const double w_ds = e_ds + gamma(T + 1) * (ds + e_ds), w_a = e_a + gamma(T + 1) * (P * kp + e_a);
                    for (int i = 0; i < hs; ++i) {
                        limit[g.q(b, t, h) + i] += w_ds * std::fabs(kj[i]);          // dq_t
                        limit[g.q(b, j, h) + C + i] += w_ds * std::fabs(qt[i]);      // dk_j
                        limit[g.q(b, j, h) + 2 * C + i] += w_a * std::fabs(dyt[i]);  // dv_j
                    }
                }
            });
            for (double& v : limit) v *= 2 * (1 + rel_y);
            bw.checks = {{4, rel_y, 0, fixed(limit)}};
            cases.push_back(bw);
        }
    return cases;
}

// The fused classifier (kernels/cpu/classifier.cpp, kernels/cuda/classifier.cu). Not bit-identical:
// the device uses expf and an online (running-max) sum, the CPU its own polynomial exp_approx
// (kernels/vector_math.h, within ~2 ulp of expf) over the max-subtracted row, summed in SIMD lanes.
// Losses: logsumexp - (logit - max) is a few ulp off in each term; the absolute floor is for a
// loss near 0 (a confident target: log of a sum just above 1, whose float spacing is 1.2e-7; seen
// 2.4e-7 off). They stay fp32 in bf16, from the same values: the fp32 tolerance. dlogits: exp(x -
// max) * dloss / sum carries the exp's few ulp and the sum's; at the target, softmax - 1 cancels,
// so the floor is a few ulp of dloss itself (1e-6 |dloss| is ~10 ulp); in bf16 widened by
// bf16_tolerance; the padded columns exactly 0 (bound 0 there). With dloss 0 the logits are
// untouched, bit for bit.
std::vector<OpCase> classifier_cases(DType a) {
    constexpr double kLossRel = 1e-5, kLossAbs = 1e-6, kGradRel = 1e-5, kGradAbsPerDloss = 1e-6;
    constexpr float kPadding = 7.0f;  // what the padded columns hold before the kernel runs (exact in bf16)
    struct Shape {
        int N, V, Vp;
        float dloss, spread;
    };
    // One row, several, no padding, and wider than the block (512 threads): several columns per
    // thread, the running max moving; V = 9001 is more than two of the block's sweeps of 16-byte
    // packs in bf16 (4096 columns each). V = 60000 is more than three rounds of the loads a thread
    // has in flight (4 packs: 16384 columns a round in bf16, 8192 in fp32), and in fp32 (240 KB)
    // more than a block's shared memory on any GPU (227 KiB at most), so the row's last columns are
    // not cached and the second sweep reads them from the row again.
    const Shape shapes[] = {{1, 101, 128, 0.0f, 4.0f},    {5, 101, 128, 0.0f, 4.0f},    {1, 101, 128, 1.0f, 4.0f},
                            {5, 101, 128, 0.2f, 4.0f},    {3, 101, 101, 0.5f, 8.0f},    {4, 2051, 2112, 0.25f, 8.0f},
                            {2, 9001, 9024, 0.25f, 8.0f}, {1, 60000, 60032, 0.5f, 8.0f}};
    std::vector<OpCase> cases;
    for (const Shape& s : shapes) {
        std::vector<float> targets(s.N);
        for (int i = 0; i < s.N; ++i) targets[i] = static_cast<float>(i == 0 ? 0 : (i == 1 ? s.V - 1 : (i * 37) % s.V));
        std::vector<float> logits = random_floats(static_cast<std::size_t>(s.N) * s.Vp, 31 + s.V, -s.spread, s.spread);
        for (int i = 0; i < s.N; ++i)
            for (int j = s.V; j < s.Vp; ++j) logits[static_cast<std::size_t>(i) * s.Vp + j] = kPadding;
        // A row whose target dominates, so its loss is ~0 and its dlogit at the target cancels.
        if (s.N > 2) logits[2 * static_cast<std::size_t>(s.Vp) + static_cast<int>(targets[2])] = 4.0f * s.spread;
        OpCase c = op_case("fused_classifier N=" + std::to_string(s.N) + " V=" + std::to_string(s.V) +
                               " Vp=" + std::to_string(s.Vp) + " dloss=" + std::to_string(s.dloss),
                           a, {Kernel::fused_classifier},
                           {{Elem::act, as_activation(logits, a, Elem::act)}, f32_zeros(s.N), {Elem::i32, targets}});
        c.run = [s](const KernelTable& k, const KernelContext& ctx, const Placed& p) {
            k.fused_classifier(ctx, p.act(0), p.f32(1), p.i32(2), s.N, s.V, s.Vp, s.dloss);
        };
        c.checks = {{1, kLossRel, kLossAbs}};
        if (s.dloss == 0.0f) {
            c.checks.push_back({0});
        } else {
            Check t{0, kGradRel, kGradAbsPerDloss * std::fabs(s.dloss)};
            if (a == DType::bf16) t = bf16_tolerance(t);
            const double abs = t.abs;
            t.abs = 0;
            t.bound = [s, abs](const std::vector<float>& want) {
                std::vector<double> bound(want.size(), abs);
                for (int i = 0; i < s.N; ++i)
                    for (int j = s.V; j < s.Vp; ++j) bound[static_cast<std::size_t>(i) * s.Vp + j] = 0.0;
                return bound;
            };
            c.checks.push_back(t);
        }
        cases.push_back(c);
    }
    return cases;
}

// The optimizer's kernels (kernels/cpu/adamw.cpp, classifier.cpp; kernels/cuda/adamw.cu,
// classifier.cu), on fp32 state in every dtype; in bf16 AdamW also writes the bf16 working copy.
// AdamW: the device runs the CPU twin's operations in its order, with the four FMAs GCC makes of
// them under -march=native (the default build) written out as fmaf (kernels/cuda/adamw.cu), so with
// GCC and FMA hardware the parameters, moments and working copy are bit-identical. Any other host
// compiler may fuse differently (or not at all): then a few ulp, well within 1e-6 relative, and
// the working copy (those values rounded to bf16 once) within bf16_tolerance of that.
#if defined(__GNUC__) && !defined(__clang__) && defined(__FMA__)
constexpr double kAdamRel = 0.0;
#else
constexpr double kAdamRel = 1e-6;
#endif
std::vector<OpCase> optimizer_cases(DType a) {
    std::vector<OpCase> cases;
    const bool working = a == DType::bf16;
    // Clipping, the skip on a non-finite norm and the bf16 working copy run on the device from the
    // norm in device memory, as the CPU twin runs them from the norm in host memory. Steps 1..3
    // from zero moments (bias corrections large), then step 1000; with and without weight decay;
    // at step 3 the norm is above the clip (scale 0.5).
    const int steps[] = {1, 2, 3, 1000};
    for (long n : {1L, 37L, 1000L, 4099L}) {
        std::vector<Buffer> buffers = {
            f32_values(n, 1), f32_zeros(n), f32_zeros(n), {Elem::b16, std::vector<float>(n)}};
        for (int t : steps) buffers.push_back({Elem::f32, random_floats(n, 10 + t, -0.1f, 0.1f)});
        for (int i = 0; i < 4; ++i) buffers.push_back({Elem::f32, {i == 2 ? 2.0f : 0.5f}});
        OpCase c = op_case("adamw_update n=" + std::to_string(n) + (working ? " with a bf16 working copy" : ""), a,
                           {Kernel::adamw_update}, buffers);
        c.run = [n, working, steps](const KernelTable& k, const KernelContext& ctx, const Placed& p) {
            // Buffers: 0 params, 1 m, 2 v, 3 working, 4..7 each step's gradients, 8..11 its norm.
            for (int i = 0; i < 4; ++i)
                k.adamw_update(ctx, p.f32(0), working ? p.act(3) : nullptr, p.f32(4 + i), p.f32(1), p.f32(2), n, 6e-4f,
                               0.9f, 0.95f, 1e-8f, i % 2 ? 0.0f : 0.1f, 1.0f, p.f32(8 + i), steps[i]);
        };
        c.checks = {{0, kAdamRel}, {1, kAdamRel}, {2, kAdamRel}};
        if (working) c.checks.push_back(kAdamRel == 0 ? Check{3} : bf16_tolerance({3, kAdamRel}));
        cases.push_back(c);
    }
    if (a != DType::f32) return cases;  // the norm and the loss read fp32 in every dtype
    // The global norm: squares of floats are exact in double, so the two sums of n of them differ
    // only in the order of the additions, each within gamma_d(n) of the exact sum (relative: the
    // terms are positive), their square roots within gamma_d(n) / 2 + u_d; each then rounded to
    // float (2^-24 of itself): 2^-23 + 2 gamma_d(n + 2) relative apart. 1100001 elements: more than
    // 1024 blocks of 256 threads of 4-float packs, so the first pass strides (and ends in a part pack).
    for (long n : {0L, 1L, 37L, 1000L, 1100001L}) {
        OpCase c = op_case("global_norm n=" + std::to_string(n), a, {Kernel::global_norm},
                           {{Elem::f32, random_floats(n, 40 + n, -3.0f, 3.0f)}, {Elem::f32, {-1.0f}}});
        c.run = [n](const KernelTable& k, const KernelContext& ctx, const Placed& p) {
            k.global_norm(ctx, p.f32(1), p.f32(0), n);
        };
        c.checks = {{1, 2 * kU + 2 * gamma_d(n + 2)}};
        cases.push_back(c);
    }
    // The loss sum, twice (a step's second micro-batch accumulates): one block of double partials
    // against the CPU's sequential double sum (gamma_d(n + 1) of each other), each call's total
    // rounded once to float (2^-24 of itself). The first totals 2^-23 apart, relative, and with
    // positive losses no larger than the second's; the second adds its own two roundings: 2^-22 of
    // the result, plus the sums' 2 gamma_d(n + 1) of each, apart.
    for (int n : {1, 7, 1000, 5001}) {
        OpCase c = op_case("loss_accumulate n=" + std::to_string(n), a, {Kernel::loss_accumulate},
                           {{Elem::f32, random_floats(n, 50 + n, 0.0f, 11.0f)},
                            {Elem::f32, random_floats(n, 60 + n, 0.0f, 11.0f)},
                            f32_nans(1)});
        c.run = [n](const KernelTable& k, const KernelContext& ctx, const Placed& p) {
            k.loss_accumulate(ctx, p.f32(2), p.f32(0), n, 3.0 * n, false);
            k.loss_accumulate(ctx, p.f32(2), p.f32(1), n, 3.0 * n, true);
        };
        c.checks = {{2, 4 * kU * (1 + 2 * kU) + 4 * gamma_d(n + 1)}};
        cases.push_back(c);
    }
    return cases;
}

// The activation codecs (kernels/cpu/codecs.cpp, kernels/cuda/codec*.cu): the blob format is
// backend-neutral, so each case compresses on both backends into a slot of codec_max_bytes
// pre-filled with 0xA5 and compares the slots byte for byte (header, sections, zero padding, and
// past the exact size the fill: a byte left unwritten or written past the blob shows); the
// outlier codec's statistics left in the scratch (Z, or Sh when std = 0), bit for bit (summed in
// the CPU's order; data of magnitudes 2^-30..2^30 makes the order matter); codec_outlier_count's
// k; and each decoding of its own blob (so, the blobs being equal, each decodes the other's),
// NaN-filled first, bit for bit (in bf16: the CPU's decoded floats rounded to nearest even, as the
// device's store rounds). In fp32 also codec_error of the original and the decoded tensor: see
// codec_error_cases. asym_int4 may differ from the CPU in the sign of a zero scale for a group of
// zeros of both signs (kernels/cuda/codec_asym_int4.cu); the data here has no negative zeros.
constexpr unsigned char kBlobFill = 0xA5;

// codec_error's relative_l2 sums squares in double in another order than the CPU's OpenMP
// reduction: each sum within gamma_d(n + 1) of the exact one (its squares and differences rounded
// once), the ratio's square root within 2 gamma_d(n + 2); stored as a float here (2^-24 each):
// 2^-23 + 4 gamma_d(n + 2) relative apart. max_abs_error is a max of the same values: bit for bit.
void add_error_checks(OpCase& c, int original, int decoded, std::size_t n) {
    const int rel_l2 = static_cast<int>(c.buffers.size());
    c.buffers.push_back(f32_nans(1));  // relative_l2
    c.buffers.push_back(f32_nans(3));  // max_abs_error, bytes, outlier_fraction (both 0 here)
    c.kernels.push_back(Kernel::codec_error);
    auto compress_run = c.run;
    c.run = [compress_run, original, decoded, n, rel_l2](const KernelTable& k, const KernelContext& ctx,
                                                         const Placed& p) {
        if (compress_run) compress_run(k, ctx, p);
        const CodecStats s = k.codec_error(ctx, p.act(original), p.act(decoded), n);
        p.write(rel_l2, {static_cast<float>(s.relative_l2)});
        p.write(rel_l2 + 1, {s.max_abs_error, static_cast<float>(s.bytes), s.outlier_fraction});
    };
    c.checks.push_back({rel_l2, 2 * kU + 4 * gamma_d(static_cast<long>(n) + 2)});
    c.checks.push_back({rel_l2 + 1});
}

OpCase codec_case(DType a, Codec codec, const std::string& data, const std::vector<float>& x, std::size_t rows,
                  std::size_t cols, const CodecParams& p) {
    const std::size_t n = rows * cols, max_bytes = codec_max_bytes(codec, rows, cols, p),
                      scratch = codec_scratch_bytes(codec, rows, cols, p);
    std::string name = std::string(codec_name(codec)) + " " + data + " " + std::to_string(rows) + "x" +
                       std::to_string(cols) + " G=" + std::to_string(p.group_size);
    if (codec == Codec::outlier_int4) name += " cap=" + std::to_string(p.max_outlier_channels);
    // Buffers: 0 the tensor, 1 the slot, 2 the scratch, 3 k, 4 the decoded tensor.
    OpCase c =
        op_case("codec " + name, a, {Kernel::codec_compress, Kernel::codec_outlier_count, Kernel::codec_decompress},
                {{Elem::act, as_activation(x, a, Elem::act)},
                 {Elem::u8, std::vector<float>(std::max<std::size_t>(max_bytes, 1), kBlobFill)},
                 {Elem::u8, std::vector<float>(scratch)},
                 {Elem::i32, {-1.0f}},
                 act_nans(n)});
    c.run = [codec, rows, cols, p, scratch](const KernelTable& k, const KernelContext& ctx, const Placed& pl) {
        KernelContext with_scratch = ctx;
        with_scratch.scratch = scratch ? pl.data(2) : nullptr;
        with_scratch.scratch_bytes = scratch;
        k.codec_compress(with_scratch, codec, pl.act(0), rows, cols, p, pl.data(1));
        pl.write(3, {static_cast<float>(k.codec_outlier_count(ctx, codec, pl.data(1)))});
        k.codec_decompress(ctx, codec, pl.data(1), rows, cols, pl.act(4));
    };
    c.checks = {{1}, {3}, {4}};
    if (codec == Codec::outlier_int4 && rows > 0 && outlier_channel_cap(cols, p) > 0)
        c.checks.push_back({2, 0, 0, nullptr, 8 * cols});  // Z (or Sh), doubles, as bytes
    if (a == DType::f32 && n > 0) add_error_checks(c, 0, 4, n);
    return c;
}

CodecParams codec_params(int group_size, int max_outlier_channels = -1) {
    CodecParams p;
    p.group_size = group_size;
    if (max_outlier_channels >= 0) p.max_outlier_channels = max_outlier_channels;
    return p;
}

// The INT4 codecs in fp32 and bf16 (the tensor rounded to bf16 compresses to the CPU's blob of
// the same values as floats). Shapes are odd (rows 1, 7, 33; cols 40, 72, 100; odd group sizes,
// G = 1 and 4096) plus one with more rows than a chunk of the channel maxima (140 rows).
// group_int4's and asym_int4's one-pass rows (packed rows, a group on 1
// to 32 lanes of 16-byte packs): G = 8 (one lane in bf16, two in fp32), 64 and 256 (32 lanes in
// bf16; 64 in fp32, which takes the two-pass path), and 4160 columns, more than one round of a
// thread's loads.
std::vector<OpCase> codec_cases(DType a) {
    struct Shape {
        std::size_t rows, cols;
        int G;
    };
    const Shape shapes[] = {{1, 40, 64},  {7, 72, 64},    {33, 100, 64}, {7, 100, 7}, {33, 72, 16},   {5, 40, 1},
                            {3, 100, 33}, {1, 100, 4096}, {140, 72, 64}, {5, 72, 8},  {2, 1024, 256}, {3, 4160, 64}};
    std::vector<OpCase> cases;
    for (const auto& [rows, cols, G] : shapes) {
        const CodecParams p = codec_params(G);
        cases.push_back(codec_case(a, Codec::group_int4, "activations", codec_activations(rows, cols, rows * 31 + cols),
                                   rows, cols, p));
        // channel_int4 ignores the group size, but writes it in its header.
        cases.push_back(codec_case(a, Codec::channel_int4, "activations",
                                   codec_activations(rows, cols, rows * 37 + cols), rows, cols, p));
        cases.push_back(codec_case(a, Codec::asym_int4, "probabilities",
                                   codec_probabilities(rows, cols, rows * 41 + cols), rows, cols, p));
        cases.push_back(codec_case(a, Codec::asym_int4, "activations", codec_activations(rows, cols, rows * 43 + cols),
                                   rows, cols, p));
        // Random activations: the selection runs on the device (k mostly 0 or a few chance channels).
        const CodecParams o = codec_params(G, static_cast<int>(std::max<std::size_t>(1, cols / 8)));
        cases.push_back(codec_case(a, Codec::outlier_int4, "activations",
                                   codec_activations(rows, cols, rows * 47 + cols), rows, cols, o));
        cases.push_back(codec_case(a, Codec::outlier_int4, "wide range", codec_wide_range(rows, cols, rows * 53 + cols),
                                   rows, cols, o));
    }
    // channel_int4: columns of very different scales, one of them all zero (scale 0).
    {
        const std::size_t rows = 33, cols = 72;
        std::vector<float> x = codec_with_outliers(rows, cols, {3, 40, 71}, 5, 100.0f);
        for (std::size_t i = 0; i < rows; ++i) x[i * cols + 10] = 0.0f;
        cases.push_back(codec_case(a, Codec::channel_int4, "scaled columns", x, rows, cols, CodecParams{}));
    }
    // outlier_int4: more columns than one shared-memory stage of the serial mean / variance (1024).
    cases.push_back(codec_case(a, Codec::outlier_int4, "wide range", codec_wide_range(3, 1100, 59), 3, 1100,
                               codec_params(CodecParams{}.group_size, 20)));
    // outlier_int4: three chunks of rows in the channel sums (kOutlierSumRows), on data whose double
    // sums round: the device adds them in the CPU's order (Z compared bit for bit).
    cases.push_back(codec_case(a, Codec::outlier_int4, "wide range", codec_wide_range(2085, 40, 61), 2085, 40,
                               codec_params(16, 5)));
    // Planted outlier channels (x50), which groups of the compacted rows straddle; three chunks of
    // the channel sums (2085 rows); more columns than a stage
    // (CudaCodecs.OutlierInt4PicksPlantedChannels checks that exactly these are chosen).
    for (const PlantedOutliers& c : kPlantedOutliers)
        cases.push_back(codec_case(a, Codec::outlier_int4, "planted",
                                   codec_with_outliers(c.rows, c.cols, c.planted, c.rows + c.cols), c.rows, c.cols,
                                   codec_params(c.G, 8)));
    // More candidates than the cap: graded magnitudes 3 < 10 < 20 < ... with channels 60, 61, 62
    // copies (equal Z): the cap largest Z win, ties to the lower channel. Then a low threshold:
    // most channels are candidates and the cap decides.
    {
        const std::size_t rows = 9, cols = 100;
        std::vector<float> x = codec_with_outliers(rows, cols, {}, 3);
        const std::vector<int> graded = {3, 10, 20, 30, 45, 60, 61, 62, 90};
        for (std::size_t t = 0; t < graded.size(); ++t)
            for (std::size_t i = 0; i < rows; ++i) x[i * cols + graded[t]] *= 40.0f + 5.0f * static_cast<float>(t);
        for (std::size_t i = 0; i < rows; ++i) x[i * cols + 61] = x[i * cols + 62] = x[i * cols + 60];
        for (int cap : {1, 3, 4, 5, 6, 100})
            cases.push_back(codec_case(a, Codec::outlier_int4, "graded", x, rows, cols, codec_params(16, cap)));
        CodecParams low = codec_params(CodecParams{}.group_size, 7);
        low.outlier_z = 0.0f;
        cases.push_back(codec_case(a, Codec::outlier_int4, "graded, threshold 0", x, rows, cols, low));
    }
    // |x_ij| = a_i in every column: equal Sh, std 0, k = 0 decided on the device.
    {
        const std::size_t rows = 7, cols = 72;
        cases.push_back(
            codec_case(a, Codec::outlier_int4, "flat", codec_flat_rows(rows, cols), rows, cols, codec_params(16)));
    }
    // Every channel an outlier (threshold below every Z, cap = cols): k = cols, no codes at all.
    {
        const std::size_t rows = 5, cols = 40;
        CodecParams every = codec_params(CodecParams{}.group_size, static_cast<int>(cols));
        every.outlier_z = -1e30f;
        cases.push_back(
            codec_case(a, Codec::outlier_int4, "every channel", codec_activations(rows, cols, 9), rows, cols, every));
    }
    // cols < 16: the default cap is 0, no selection runs (no scratch).
    cases.push_back(codec_case(a, Codec::outlier_int4, "narrow", codec_activations(7, 15, 10), 7, 15, CodecParams{}));
    // group_int4's two-pass kernel stages a row in shared memory where it fits: a row of 60000
    // (G = 7, no one pass) does in bf16 (120 KB), and in fp32 (240 KB) is more than a block's
    // shared memory on any GPU (227 KiB at most), so it is read where it is.
    cases.push_back(
        codec_case(a, Codec::group_int4, "wide", codec_activations(2, 60000, 11), 2, 60000, codec_params(7)));
    // Empty tensors: the header alone (channel_int4 with no rows: zero scales).
    for (Codec codec : {Codec::group_int4, Codec::outlier_int4, Codec::channel_int4, Codec::asym_int4}) {
        cases.push_back(codec_case(a, codec, "empty", {}, 0, 40, CodecParams{}));
        cases.push_back(codec_case(a, codec, "empty", {}, 7, 0, CodecParams{}));
    }
    return cases;
}

// bitpack (mask bytes in every dtype): any nonzero byte is a 1. The mask both at an aligned
// address (8-byte loads) and one byte off (byte loads), decoded into a buffer at the same offset
// with guard bytes (0xEE) on both sides, compared whole; an empty mask writes nothing.
std::vector<OpCase> bitpack_cases(DType a) {
    std::vector<OpCase> cases;
    if (a != DType::f32) return cases;
    const std::pair<std::size_t, std::size_t> shapes[] = {{1, 1}, {1, 7},  {1, 8},   {3, 3},   {7, 9},    {1, 63},
                                                          {8, 8}, {5, 13}, {33, 40}, {7, 100}, {1, 4099}, {0, 5}};
    for (const auto& [rows, cols] : shapes)
        for (std::size_t offset : {0, 1}) {
            const std::size_t n = rows * cols, max_bytes = codec_max_bytes(Codec::bitpack, rows, cols, CodecParams{});
            std::vector<unsigned char> mask = random_mask(n, n, 0.9f);
            if (n > 5) mask[1] = 2, mask[2] = 255, mask[5] = 128;
            std::vector<float> src(offset, 7.0f);
            src.insert(src.end(), mask.begin(), mask.end());
            OpCase c = op_case("codec bitpack " + std::to_string(rows) + "x" + std::to_string(cols) + " offset " +
                                   std::to_string(offset),
                               a, {Kernel::codec_compress, Kernel::codec_outlier_count, Kernel::codec_decompress},
                               {{Elem::u8, src},
                                {Elem::u8, std::vector<float>(std::max<std::size_t>(max_bytes, 1), kBlobFill)},
                                {Elem::i32, {-1.0f}},
                                {Elem::u8, std::vector<float>(offset + n + 16, 0xEE)}});
            c.run = [rows = rows, cols = cols, offset](const KernelTable& k, const KernelContext& ctx,
                                                       const Placed& p) {
                k.codec_compress(ctx, Codec::bitpack, p.u8(0) + offset, rows, cols, CodecParams{}, p.data(1));
                p.write(2, {static_cast<float>(k.codec_outlier_count(ctx, Codec::bitpack, p.data(1)))});
                k.codec_decompress(ctx, Codec::bitpack, p.data(1), rows, cols, p.u8(3) + offset);
            };
            c.checks = {{1}, {2}, {3}};
            cases.push_back(c);
        }
    return cases;
}

// codec_error on its own: a tensor and a noisy copy (what the monitor samples), in bf16 the CPU's
// sums of the bf16 values. 70001 elements: every block of the first pass has work.
std::vector<OpCase> codec_error_cases(DType a) {
    std::vector<OpCase> cases;
    for (std::size_t n : {1u, 17u, 1000u, 70001u}) {
        const std::vector<float> x = codec_activations(1, n, n);
        std::vector<float> y = x;
        const std::uint64_t key = mix64(n + 1);
        for (std::size_t i = 0; i < n; ++i) y[i] += 0.01f * static_cast<float>(rng_normal(key, i));
        OpCase c = op_case("codec_error n=" + std::to_string(n), a, {},
                           {{Elem::act, as_activation(x, a, Elem::act)}, {Elem::act, as_activation(y, a, Elem::act)}});
        add_error_checks(c, 0, 1, n);
        cases.push_back(c);
    }
    return cases;
}

// The table: one row per op family, each making its cases for an activation dtype.
struct Family {
    const char* name;
    std::vector<OpCase> (*cases)(DType);
};
const Family kFamilies[] = {
    {"gelu", gelu_cases},
    {"dropout_mask", dropout_mask_cases},
    {"residual_dropout", residual_dropout_cases},
    {"encoder", encoder_cases},
    {"layernorm", layernorm_cases},
    {"matmul", matmul_cases},
    {"matmul_gelu", matmul_gelu_cases},
    {"attention", attention_cases},
    {"attention_fused", attention_fused_cases},
    {"classifier", classifier_cases},
    {"optimizer", optimizer_cases},
    {"codecs", codec_cases},
    {"bitpack", bitpack_cases},
    {"codec_error", codec_error_cases},
};

std::vector<OpCase> all_cases() {
    std::vector<OpCase> out;
    for (const Family& f : kFamilies)
        for (DType a : kBoth)
            for (OpCase& c : f.cases(a)) out.push_back(std::move(c));
    return out;
}

TEST(CudaOps, EveryCaseOfTheTableMatchesTheCpuBackend) {
    ADACC_REQUIRE_CUDA_DEVICE();
    for (const OpCase& c : all_cases()) run_twins(c);
}

// Every kernel of kernels/ops.inc has a case in the table, but cuDNN's attention: the emulation
// cannot run a library's kernels, so its twin test (against the CPU's fused kernel) is
// test_cuda_attention_cudnn.cpp, on a GPU with cuDNN.
const std::set<std::string> kLibraryKernels = {"attention_cudnn_forward", "attention_cudnn_backward"};

TEST(CudaOps, EveryKernelIsInTheTable) {
    std::set<std::string> in_table;
    for (const OpCase& c : all_cases())
        for (Kernel k : c.kernels) in_table.insert(kernel_name(k));
    for (int i = 0; i < kNumKernels; ++i)
        EXPECT_EQ(in_table.count(kKernelNames[i]) + kLibraryKernels.count(kKernelNames[i]), 1u)
            << kKernelNames[i] << " is checked nowhere";
}

// ---- beyond the twins ---------------------------------------------------------------------------

// residual + masked branch on the device is exactly residual + round(inp * scale) (two roundings,
// never contracted), whatever FMA contraction the CPU twin's compiler chose.
TEST(CudaOps, ResidualDropoutForwardRoundsTheProductThenTheSum) {
    ADACC_REQUIRE_CUDA_DEVICE();
    Backend& gpu = cuda_backend();
    const long n = 4099;
    const float p = 0.1f, scale = 1.0f / (1.0f - p);
    for (DType a : kBoth) {
        OpCase c = op_case("residual_dropout_forward", a, {},
                           {act_values(a, n, 1), act_values(a, n, 2), mask_values(n, 3, 0.9f), act_zeros(n)});
        const Placed placed(gpu, c, a);
        gpu.kernels().residual_dropout_forward(gpu.context(), placed.act(3), placed.act(0), placed.act(1), placed.u8(2),
                                               p, n);
        const std::vector<float>&residual = c.buffers[0].values, &inp = c.buffers[1].values,
              &mask = c.buffers[2].values;
        std::vector<float> want(n);
        for (long i = 0; i < n; ++i) {
            volatile float product = inp[i] * scale;  // volatile: rounded, never contracted
            want[i] = residual[i] + (mask[i] != 0 ? static_cast<float>(product) : 0.0f);
        }
        EXPECT_TRUE(all_equal_bytes(placed.read(3, n), as_activation(want, a, Elem::act))) << dtype_name(a);
    }
}

// The GPU's sort (CUB's radix sort) at a training batch's size, B*T = 65536 positions over
// GPT-2's vocabulary: a quarter of them on 5 tokens (runs of ~3300 positions, walked in batches),
// the rest uniform (repeats and single positions). dwte and dwpe must still be the CPU's bit for
// bit. The emulation sorts by O(n^2) ranking, far too slow here; its small cases are in the table.
TEST(CudaOps, EncoderBackwardAtATrainingBatchIsTheCpusBitForBit) {
    ADACC_REQUIRE_CUDA_DEVICE();
    if (running_under_emulation()) GTEST_SKIP() << "the emulation's O(n^2) sort: the table's small cases test it";
    const EncoderShape s{64, 1024, 192, 50257};
    const std::size_t N = static_cast<std::size_t>(s.B) * s.T;
    Buffer tokens = token_values(N, s.V, 77);
    for (std::size_t i = 0; i < N; i += 4) tokens.values[i] = static_cast<float>(i / 4 % 5);
    for (DType a : kBoth) run_twins(encoder_backward_case(a, s, tokens));
}

// Activations of one call must share a dtype: a mixed call is refused, not read as the wrong bits.
TEST(CudaOps, ActivationsOfDifferentDtypesAreRefused) {
    ADACC_REQUIRE_CUDA_DEVICE();
    Backend& gpu = cuda_backend();
    const KernelTable& k = gpu.kernels();
    const KernelContext& ctx = gpu.context();
    const Arena b16_arena(gpu, 8 * sizeof(bf16)), f32_arena(gpu, 8 * sizeof(float));
    const Act b16(b16_arena.data(), DType::bf16), f32(f32_arena.data(), DType::f32);
    EXPECT_THROW(k.gelu_forward(ctx, b16, f32, 8), std::invalid_argument);
    EXPECT_THROW(k.gelu_backward(ctx, b16, b16, f32, 8), std::invalid_argument);
    EXPECT_THROW(k.residual_dropout_forward(ctx, b16, b16, f32, nullptr, 0.1f, 8), std::invalid_argument);
    EXPECT_THROW(k.residual_dropout_backward(ctx, b16, f32, nullptr, 0.1f, 8), std::invalid_argument);
    EXPECT_THROW(k.dropout_forward(ctx, f32, b16, nullptr, 0.1f, 8), std::invalid_argument);
    // Embeddings of another dtype than the output.
    const std::vector<int> two_tokens = {1, 2};
    const Arena tokens(gpu, sizeof(int) * two_tokens.size());
    gpu.copy_to_device(tokens.data(), two_tokens.data(), sizeof(int) * two_tokens.size());
    EXPECT_THROW(k.encoder_forward(ctx, b16, tokens.as<const int>(), f32, b16, 1, 2, 4), std::invalid_argument);
}

// A GELU epilogue's width must meet cuBLASLt's rule for its aux matrix's leading dimension (a
// multiple of kGeluEpilogueColumns): both backends refuse another, so a shape that runs on one runs
// on the other.
TEST(CudaOps, GeluEpilogueWidthsOffCublasLtsRuleAreRefusedByBothBackends) {
    ADACC_REQUIRE_CUDA_DEVICE();
    for (Backend* backend : {&cpu_backend(), &cuda_backend()}) {
        const KernelTable& k = backend->kernels();
        const KernelContext& ctx = backend->context();
        constexpr int N = 2, C = 8, Odd = 12;  // Odd: not a multiple of 8
        const Arena x(*backend, N * Odd * sizeof(float)), w(*backend, Odd * C * sizeof(float)),
            y(*backend, N * Odd * sizeof(float)), pre(*backend, N * Odd * sizeof(float)),
            dw(*backend, Odd * C * sizeof(float));
        EXPECT_THROW(k.matmul_gelu_forward(ctx, y.as<float>(), pre.as<float>(), x.as<const float>(),
                                           w.as<const float>(), nullptr, N, C, Odd),
                     std::invalid_argument)
            << device_name(backend->device());
        EXPECT_THROW(
            k.matmul_dgelu_backward(ctx, pre.as<float>(), dw.as<float>(), nullptr, y.as<const float>(),
                                    x.as<const float>(), pre.as<const float>(), w.as<const float>(), N, Odd, C, false),
            std::invalid_argument)
            << device_name(backend->device());
    }
}

}  // namespace
}  // namespace adacc::test
