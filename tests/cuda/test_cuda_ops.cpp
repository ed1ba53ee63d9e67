// Every kernel against its CPU twin from one table, in the style of ggml's test-backend-ops: a
// case names its kernels, its buffers with their starting values, how to run it through a
// KernelTable, and which buffers to compare with what tolerance (each derived where it is
// written). The harness runs each case through Backend::kernels() twice on the same values: on
// the CPU backend (the reference, always fp32 activations: a bf16 case's values are ones bf16
// holds) and on the CUDA backend (the SIMT emulation in test_cuda_emulated, the GPU in
// test_cuda_device, which skips without one). A backend that does not support a case's kernel
// for its dtype (Backend::supports) skips the case, as test-backend-ops does, saying so.
// Checks beyond a twin comparison (a rounding formula, refused dtypes) follow the table.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/rng.h"
#include "src/engine/backend.h"
#include "tests/cuda/cuda_test_support.h"

namespace adacc::test {
namespace {

// A buffer's elements: the case's activation dtype, fp32 (statistics, losses, gradients), bytes
// (dropout masks) or int32 (token ids).
enum class Elem { act, f32, u8, i32 };

struct Buffer {
    Elem elem;
    std::vector<float> values;  // starting contents (an act buffer's are values its dtype holds)
};

// Compared after the run: bit for bit when rel and abs are both 0, else within rel |want| + abs
// of the CPU's fp32 result, a tolerance stated for fp32 (bf16_tolerance widens it).
struct Check {
    int buffer;
    double rel = 0, abs = 0;
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
    for (const Check& check : c.checks) out.push_back(placed.read(check.buffer, c.buffers[check.buffer].values.size()));
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
std::vector<OpCase> encoder_cases(DType a) {
    struct Shape {
        int B, T, C, V;
        bool one_token;  // every position on token 4: one run of B*T positions, other rows untouched
    };
    // T = 1; odd shapes with repeated tokens (V small); channels over two blocks (C = 300 > 256);
    // N = 260 positions: three 128-key sort tiles, runs up to ~10; N = 1100 > 1024 walk blocks,
    // which stride over the sorted positions.
    const Shape shapes[] = {{1, 1, 40, 5, false},   {2, 7, 40, 13, false}, {3, 5, 300, 4, false},
                            {2, 1, 72, 101, false}, {3, 9, 72, 6, true},   {4, 65, 72, 37, false},
                            {2, 550, 40, 50, false}};
    std::vector<OpCase> cases;
    for (const Shape& s : shapes) {
        const std::size_t N = static_cast<std::size_t>(s.B) * s.T, C = s.C;
        const std::string shape = " B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) +
                                  " C=" + std::to_string(s.C) + " V=" + std::to_string(s.V) +
                                  (s.one_token ? " one token" : "");
        const Buffer tokens =
            s.one_token ? Buffer{Elem::i32, std::vector<float>(N, 4.0f)} : token_values(N, s.V, 21 + s.C);
        OpCase f = op_case("encoder_forward" + shape, a, {Kernel::encoder_forward},
                           {tokens, act_values(a, s.V * C, 11), act_values(a, s.T * C, 12), act_zeros(N * C)});
        f.run = [s](const KernelTable& k, const KernelContext& ctx, const Placed& p) {
            k.encoder_forward(ctx, p.act(3), p.i32(0), p.act(1), p.act(2), s.B, s.T, s.C);
        };
        f.checks = {{3}};
        cases.push_back(f);
        OpCase b = op_case("encoder_backward" + shape, a, {Kernel::encoder_backward},
                           {tokens, act_values(a, N * C, 13), f32_values(s.V * C, 14), f32_values(s.T * C, 15)});
        b.run = [s](const KernelTable& k, const KernelContext& ctx, const Placed& p) {
            k.encoder_backward(ctx, p.f32(2), p.f32(3), p.act(1), p.i32(0), s.B, s.T, s.C);
        };
        b.checks = {{2}, {3}};
        cases.push_back(b);
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

// The kernels of kernels/ops.inc the table does not run yet, and the file whose hand-written twin
// test checks each: the list the table shrinks, so that no kernel goes unchecked.
const std::set<std::string> kTwinTestedElsewhere = {
    "layernorm_forward",
    "layernorm_backward",  // test_cuda_layernorm.cpp
    "matmul_forward",
    "matmul_backward",  // test_cuda_matmul.cpp
    "attention_softmax_forward",
    "attention_value_forward",  // test_cuda_attention.cpp
    "attention_value_backward",
    "attention_softmax_backward",
    "attention_fused_forward",
    "attention_fused_backward",  // test_cuda_attention_fused.cpp
    "attention_cudnn_forward",
    "attention_cudnn_backward",  // test_cuda_attention_cudnn.cpp (on a GPU with cuDNN)
    "fused_classifier",
    "loss_accumulate",  // test_cuda_classifier.cpp
    "global_norm",
    "adamw_update",  // test_cuda_adamw.cpp
    "codec_compress",
    "codec_decompress",  // test_cuda_codecs.cpp
    "codec_outlier_count",
    "codec_error",
};

TEST(CudaOps, EveryKernelIsInTheTableOrTwinTestedInItsOwnFile) {
    std::set<std::string> in_table;
    for (const OpCase& c : all_cases())
        for (Kernel k : c.kernels) in_table.insert(kernel_name(k));
    for (int i = 0; i < kNumKernels; ++i) {
        const std::string name = kKernelNames[i];
        EXPECT_NE(in_table.count(name) + kTwinTestedElsewhere.count(name), 0u) << name << " is checked nowhere";
        EXPECT_FALSE(in_table.count(name) && kTwinTestedElsewhere.count(name))
            << name << " is in the table: take it off kTwinTestedElsewhere";
    }
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

}  // namespace
}  // namespace adacc::test
