// Hugging Face GPT-2 folders (src/io/hf_gpt2.h) in and out. The committed tiny folders that
// dev/make_hf_gpt2_fixture.py wrote with the safetensors package (one fp32 file named as the
// Hub's gpt2 names it, one fp16 pair of shards with an index, named as save_pretrained names them)
// give the logits of that script's independent numpy forward, which follows transformers'
// conventions (Conv1D [in, out], gelu_new, tied head); bf16 weights load as their rounded values;
// export then import is bit for bit, through the library and through the command line; and every
// config.json or tensor the engine cannot run exactly is exit status 2 naming the key or tensor,
// both values and the fix.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "models/gpt_params.h"
#include "src/common/errors.h"
#include "src/config/config.h"
#include "src/engine/gpt_model.h"
#include "src/io/hf_gpt2.h"
#include "src/io/safetensors.h"
#include "src/train/training_state.h"
#include "src/train/weights_file.h"
#include "tests/test_support.h"

namespace adacc {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::run_adacc;

std::vector<float> read_floats(const SafetensorsFile& file, const std::string& name) {
    const SafetensorsTensor* t = file.find(name);
    EXPECT_NE(t, nullptr) << name;
    std::vector<float> values(t ? t->numel() : 0);
    if (t) file.read_f32(*t, values.data());
    return values;
}

std::vector<float> hf_params(const fs::path& dir, const GPTConfig& shape) {
    std::vector<float> params(ParameterLayout(shape).total(), -1.0f);
    load_hf_gpt2(dir, shape, params.data());
    return params;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Round to nearest even, as torch's .to(torch.bfloat16) does.
std::uint16_t bf16_bits(float value) {
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
    return static_cast<std::uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
}
float bf16_rounded(float value) { return std::bit_cast<float>(std::uint32_t{bf16_bits(value)} << 16); }

// A copy of a safetensors file with `edit` applied to its tensors (name -> fp32 values), written
// as F32, or as BF16 when `bf16`.
using Tensors = std::map<std::string, std::pair<std::vector<std::uint64_t>, std::vector<float>>>;
void rewrite(const fs::path& file, const std::function<void(Tensors&)>& edit, bool bf16 = false) {
    Tensors tensors;
    {
        const SafetensorsFile in(file);
        for (const auto& t : in.tensors()) tensors[t.name] = {t.shape, read_floats(in, t.name)};
    }
    edit(tensors);
    std::vector<SafetensorsSpec> specs;
    for (const auto& [name, t] : tensors) specs.push_back({name, bf16 ? DType::bf16 : DType::f32, t.first});
    SafetensorsWriter out(file, specs, {{"format", "pt"}});
    for (const auto& [name, t] : tensors) {
        if (!bf16) {
            out.write_next(t.second.data(), t.second.size() * 4);
            continue;
        }
        std::vector<std::uint16_t> bits(t.second.size());
        std::transform(t.second.begin(), t.second.end(), bits.begin(), bf16_bits);
        out.write_next(bits.data(), bits.size() * 2);
    }
    out.commit();
}

void edit_config(const fs::path& dir, const std::function<void(json&)>& edit) {
    json config = json::parse(test::read_bytes(dir / "config.json"));
    edit(config);
    std::ofstream(dir / "config.json") << config.dump(2);
}

class HfGpt2 : public ::testing::Test {
protected:
    void SetUp() override {
        dir = test::scratch_dir("hf_gpt2");
        fixture = test::fixtures_dir() / "hf_gpt2_tiny";
        sharded = test::fixtures_dir() / "hf_gpt2_tiny_sharded";
        shape = read_hf_gpt2(fixture);
    }
    // The fixture's logits of `folder`'s weights on the fixture's tokens: [B, T, V] (the padded
    // columns left out), as eval and sampling read them.
    std::vector<float> engine_logits(const fs::path& folder, int& B, int& T) {
        const SafetensorsFile expected(test::fixtures_dir() / "hf_gpt2_tiny_logits.safetensors");
        const SafetensorsTensor& tokens_tensor = *expected.find("tokens");
        B = static_cast<int>(tokens_tensor.shape[0]);
        T = static_cast<int>(tokens_tensor.shape[1]);
        std::vector<int> tokens(static_cast<std::size_t>(B) * T);
        expected.read(tokens_tensor, tokens.data());
        const WeightsFile weights = open_weights_file(folder);
        GPTModel model = GPTModel::for_inference(weights.shape, B, T);
        load_weights(weights, model);
        model.forward(tokens.data(), nullptr, B, T, DropoutContext{0, 0, 0, false}, 0.0f);
        const std::size_t V = static_cast<std::size_t>(shape.vocab_size), Vp = shape.padded_vocab_size();
        std::vector<float> padded(tokens.size() * Vp), logits(tokens.size() * V);
        model.read_logits(0, tokens.size(), padded.data());
        for (std::size_t row = 0; row < tokens.size(); ++row)
            std::copy_n(padded.data() + row * Vp, V, logits.data() + row * V);
        return logits;
    }
    // Max |engine - reference| over the logits, against `reference` in the fixture.
    double max_logit_error(const fs::path& folder, const std::string& reference) {
        int B = 0, T = 0;
        const std::vector<float> got = engine_logits(folder, B, T);
        const std::vector<float> want =
            read_floats(SafetensorsFile(test::fixtures_dir() / "hf_gpt2_tiny_logits.safetensors"), reference);
        EXPECT_EQ(got.size(), want.size());
        double worst = 0;
        for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i)
            worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
        return worst;
    }
    fs::path dir, fixture, sharded;
    GPTConfig shape;
};

// Tolerance: the engine computes in fp32 what the reference computes in float64 from the same
// fp32-representable weights, and the expected logits are stored rounded to fp32. Every logit is
// the end of 2 layers of dot products of at most 4C = 32 terms, layernorms, a softmax over at
// most 8 keys and the tanh GELU (its tanh_approx is within ~1e-7 absolutely), all on values of
// order 1 (the logits reach |2|): each op adds a relative error of a few fp32 roundings
// (2^-24 ~ 6e-8) times sqrt(terms), so the logits should agree to a few 1e-7 and 1e-5 is the
// bound the issue sets, over 10x what rounding alone explains (the measured error is printed).
constexpr double kLogitTolerance = 1e-5;

TEST_F(HfGpt2, TheFixtureGivesTheNumpyReferenceLogits) {
    EXPECT_EQ(shape.n_layer, 2);
    EXPECT_EQ(shape.n_embd, 8);
    EXPECT_EQ(shape.vocab_size, 37);
    EXPECT_EQ(shape.max_seq_len, 8);
    const double error = max_logit_error(fixture, "logits");
    std::printf("fp32 folder: max |logit - numpy float64 reference| = %.3g\n", error);
    EXPECT_LE(error, kLogitTolerance);
    // The padded vocabulary rows are zero, as for llm.c files.
    const std::vector<float> params = hf_params(fixture, shape);
    const ParameterLayout layout(shape);
    const float* wte = layout.at(params.data(), ParamId::wte);
    for (std::size_t i = static_cast<std::size_t>(shape.vocab_size) * shape.n_embd; i < layout.info(ParamId::wte).numel;
         ++i)
        ASSERT_EQ(wte[i], 0.0f) << i;
}

TEST_F(HfGpt2, ShardedFp16FolderGivesItsReferenceLogits) {
    // The same tolerance: the fp16 weights are exact in fp32, so only the computation differs.
    const double error = max_logit_error(sharded, "logits_f16");
    std::printf("fp16 sharded folder: max |logit - numpy float64 reference| = %.3g\n", error);
    EXPECT_LE(error, kLogitTolerance);
    EXPECT_GT(max_logit_error(sharded, "logits"), 100 * kLogitTolerance) << "fp16 rounding must be visible";
}

TEST_F(HfGpt2, Bf16WeightsLoadAsTheirRoundedValues) {
    fs::copy(fixture, dir / "bf16");
    rewrite(
        dir / "bf16" / "model.safetensors", [](Tensors&) {}, true);
    std::vector<float> rounded = hf_params(fixture, shape);
    std::transform(rounded.begin(), rounded.end(), rounded.begin(), bf16_rounded);
    EXPECT_TRUE(same_bits(hf_params(dir / "bf16", shape), rounded));
}

// Random values in every parameter, biases and layernorms included (init_weights zeroes biases).
std::vector<float> random_params(const GPTConfig& shape, std::uint32_t seed) {
    std::vector<float> params(ParameterLayout(shape).total());
    std::mt19937 gen(seed);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    for (auto& p : params) p = normal(gen);
    const ParameterLayout layout(shape);
    float* wte = layout.at(params.data(), ParamId::wte);
    std::fill(wte + static_cast<std::size_t>(shape.vocab_size) * shape.n_embd, wte + layout.info(ParamId::wte).numel,
              0.0f);
    return params;
}

TEST_F(HfGpt2, ExportWritesGpt2LMHeadModelsStateDictAndReadsBackBitForBit) {
    const GPTConfig micro = gpt_preset("gpt-micro").value();  // L2 C16 H2 V97 (128 rows) T16
    const std::vector<float> params = random_params(micro, 3);
    save_hf_gpt2(dir / "out", micro, params.data(), "");
    EXPECT_TRUE(same_bits(hf_params(dir / "out", micro), params));

    // transformers' GPT2LMHeadModel state dict, lm_head.weight left out as save_pretrained leaves
    // out tied weights; Conv1D weights [in, out].
    const SafetensorsFile file(dir / "out" / "model.safetensors");
    EXPECT_EQ(file.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
    std::map<std::string, std::vector<std::uint64_t>> names;
    for (const auto& t : file.tensors()) {
        names[t.name] = t.shape;
        EXPECT_EQ(t.dtype, DType::f32) << t.name;
    }
    std::map<std::string, std::vector<std::uint64_t>> expected = {{"transformer.wte.weight", {97, 16}},
                                                                  {"transformer.wpe.weight", {16, 16}},
                                                                  {"transformer.ln_f.weight", {16}},
                                                                  {"transformer.ln_f.bias", {16}}};
    for (int l = 0; l < 2; ++l) {
        const std::string h = "transformer.h." + std::to_string(l) + ".";
        for (const char* ln : {"ln_1", "ln_2"}) expected[h + ln + ".weight"] = expected[h + ln + ".bias"] = {16};
        expected[h + "attn.c_attn.weight"] = {16, 48};
        expected[h + "attn.c_attn.bias"] = {48};
        expected[h + "attn.c_proj.weight"] = {16, 16};
        expected[h + "attn.c_proj.bias"] = {16};
        expected[h + "mlp.c_fc.weight"] = {16, 64};
        expected[h + "mlp.c_fc.bias"] = {64};
        expected[h + "mlp.c_proj.weight"] = {64, 16};
        expected[h + "mlp.c_proj.bias"] = {16};
    }
    EXPECT_EQ(names, expected);
    // c_attn.weight[i][o] is the engine's qkvw[o][i]; c_fc likewise.
    const ParameterLayout layout(micro);
    const std::vector<float> c_attn = read_floats(file, "transformer.h.1.attn.c_attn.weight");
    const float* qkvw = layout.at(params.data(), ParamId::qkvw, 1);
    for (std::size_t i = 0; i < 16; ++i)
        for (std::size_t o = 0; o < 48; ++o) ASSERT_EQ(c_attn[i * 48 + o], qkvw[o * 16 + i]) << i << " " << o;
    const json config = json::parse(test::read_bytes(dir / "out" / "config.json"));
    EXPECT_EQ(config["architectures"], json::array({"GPT2LMHeadModel"}));
    EXPECT_EQ(config["activation_function"], "gelu_new");
    EXPECT_EQ(config["n_positions"], 16);
    EXPECT_EQ(config["vocab_size"], 97);
    EXPECT_EQ(config["n_layer"], 2);
    EXPECT_EQ(config["n_head"], 2);
    EXPECT_EQ(config["n_embd"], 16);
    EXPECT_EQ(config["tie_word_embeddings"], true);
    EXPECT_FALSE(fs::exists(dir / "out" / "vocab.json"));  // no --vocab given
}

// A run's config and token shard for the fixture's shape (ids below its 37).
fs::path write_fixture_run_config(const fs::path& dir) {
    test::write_random_shard(dir / "train.bin", 2000, 37, 9);
    const fs::path config = dir / "run.toml";
    std::ofstream(config) << "[model]\nn_layer = 2\nn_embd = 8\nn_head = 2\nvocab_size = 37\nmax_seq_len = 8\n"
                          << "[training]\nbatch_size = 2\nseq_len = 8\nsteps = 2\nthreads = 1\n[data]\ntrain = \""
                          << (dir / "train.bin").string() << "\"\n";
    return config;
}

std::vector<json> step_records(const fs::path& run_dir) {
    std::ifstream in(run_dir / "metrics.jsonl");
    std::vector<json> records;
    for (std::string line; std::getline(in, line);) {
        json record = json::parse(line);
        if (record.contains("loss")) records.push_back(std::move(record));
    }
    return records;
}

TEST_F(HfGpt2, ExportedFolderStartsTrainingFromTheRunsExactWeights) {
    const fs::path config = write_fixture_run_config(dir);
    const std::string train = "train --config " + config.string() + " --set logging.run_dir=";
    const test::ProcessResult a = run_adacc(train + (dir / "a").string() + " --init-from " + fixture.string());
    ASSERT_EQ(a.status, 0) << a.output;
    EXPECT_NE(a.output.find("initialised from Hugging Face GPT-2 folder '" + fixture.string() + "'"), std::string::npos)
        << a.output;
    const test::ProcessResult e =
        run_adacc("export --checkpoint " + (dir / "a").string() + " --hf-model " + (dir / "hf").string());
    ASSERT_EQ(e.status, 0) << e.output;
    EXPECT_NE(e.output.find("wrote " + (dir / "hf").string() + ": Hugging Face GPT-2 folder"), std::string::npos)
        << e.output;
    EXPECT_NE(e.output.find("no tokenizer files written: add --vocab DIR"), std::string::npos) << e.output;
    EXPECT_TRUE(same_bits(hf_params(dir / "hf", shape), test::checkpoint_parameters(dir / "a")));

    // From the exported folder and from the run folder itself: the same weights, so the same
    // losses and gradient norms bit for bit.
    ASSERT_EQ(run_adacc(train + (dir / "from_hf").string() + " --init-from " + (dir / "hf").string()).status, 0);
    ASSERT_EQ(run_adacc(train + (dir / "from_run").string() + " --init-from " + (dir / "a").string()).status, 0);
    const auto from_hf = step_records(dir / "from_hf"), from_run = step_records(dir / "from_run");
    ASSERT_EQ(from_hf.size(), 2u);
    for (std::size_t i = 0; i < from_hf.size(); ++i) {
        EXPECT_EQ(from_hf[i]["loss"], from_run[i]["loss"]) << i;
        EXPECT_EQ(from_hf[i]["grad_norm"], from_run[i]["grad_norm"]) << i;
    }
}

TEST_F(HfGpt2, ExportWritesTheTokenizerFilesAutoTokenizerReads) {
    const fs::path vocab = test::shared_data_dir() / "gpt2_tokenizer";
    if (test::shared_data_dir().empty() || !fs::exists(vocab / "encoder.json"))
        GTEST_SKIP() << "../shared/data/gpt2_tokenizer not present (GPT-2's vocabulary)";
    RunConfig tiny;
    tiny.model = gpt_preset("gpt-tiny").value();  // GPT-2's 50257 tokens
    tiny.logging.run_dir = (dir / "tiny").string();
    GPTModel model(tiny.model, 1, 8);
    model.init_weights(5);
    save_training_checkpoint(dir / "tiny", tiny, model, TrainingProgress{});
    const fs::path out = dir / "tiny_hf";
    const test::ProcessResult e = run_adacc("export --checkpoint " + (dir / "tiny").string() + " --hf-model " +
                                            out.string() + " --vocab " + vocab.string());
    ASSERT_EQ(e.status, 0) << e.output;
    EXPECT_EQ(test::read_bytes(out / "vocab.json"), test::read_bytes(vocab / "encoder.json"));
    EXPECT_EQ(test::read_bytes(out / "merges.txt"), test::read_bytes(vocab / "vocab.bpe"));
    const json tokenizer = json::parse(test::read_bytes(out / "tokenizer_config.json"));
    EXPECT_EQ(tokenizer["eos_token"], "<|endoftext|>");
    EXPECT_EQ(tokenizer["model_max_length"], tiny.model.max_seq_len);
    const json config = json::parse(test::read_bytes(out / "config.json"));
    EXPECT_EQ(config["eos_token_id"], 50256);
    EXPECT_EQ(config["vocab_size"], 50257);

    // The folder is its own vocabulary (vocab.json, merges.txt) and samples as the run does.
    const std::string common = " --prompt 'Hello world' --tokens 8 --seed 3";
    const test::ProcessResult from_hf =
        run_adacc("sample --hf-model " + out.string() + " --vocab " + out.string() + common);
    const test::ProcessResult from_run =
        run_adacc("sample --checkpoint " + (dir / "tiny").string() + " --vocab " + vocab.string() + common);
    ASSERT_EQ(from_hf.status, 0) << from_hf.output;
    EXPECT_EQ(from_hf.output, from_run.output);

    // A vocabulary that is not the model's is refused.
    const fs::path micro_run = dir / "micro";
    RunConfig micro = tiny;
    micro.model = gpt_preset("gpt-micro").value();
    micro.training.seq_len = 8;
    GPTModel micro_model(micro.model, 1, 8);
    micro_model.init_weights(5);
    save_training_checkpoint(micro_run, micro, micro_model, TrainingProgress{});
    const test::ProcessResult mismatch = run_adacc("export --checkpoint " + micro_run.string() + " --hf-model " +
                                                   (dir / "y").string() + " --vocab " + vocab.string());
    EXPECT_EQ(mismatch.status, 2) << mismatch.output;
    EXPECT_NE(mismatch.output.find("has 50257 tokens, but the model's vocab_size is 97"), std::string::npos)
        << mismatch.output;
    EXPECT_FALSE(fs::exists(dir / "y" / "config.json"));
}

class HfGpt2Errors : public HfGpt2 {
protected:
    void SetUp() override {
        HfGpt2::SetUp();
        config = write_fixture_run_config(dir);
    }
    // A copy of the fixture, edited, given to `train --init-from`: exit 2 with every fragment,
    // and no run folder made.
    void expect_refused(const std::function<void(const fs::path&)>& edit, const std::vector<std::string>& fragments,
                        const std::string& sets = "") {
        const fs::path folder = dir / ("case_" + std::to_string(++cases));
        fs::copy(fixture, folder);
        edit(folder);
        const fs::path run = dir / ("run_" + std::to_string(cases));
        const test::ProcessResult r =
            run_adacc("train --config " + config.string() + " --init-from " + folder.string() +
                      " --set logging.run_dir=" + run.string() + " " + sets);
        EXPECT_EQ(r.status, 2) << r.output;
        EXPECT_NE(r.output.find("error: "), std::string::npos) << r.output;
        for (const auto& f : fragments)
            EXPECT_NE(r.output.find(f), std::string::npos) << "missing '" << f << "' in:\n" << r.output;
        EXPECT_FALSE(fs::exists(run)) << "refused before the run folder is made";
    }
    static std::function<void(const fs::path&)> set_key(const std::string& key, const json& value) {
        return [key, value](const fs::path& folder) { edit_config(folder, [&](json& c) { c[key] = value; }); };
    }
    fs::path config;
    int cases = 0;
};

TEST_F(HfGpt2Errors, AConfigJsonAdaccCannotRunNamesTheKeyBothValuesAndTheFix) {
    expect_refused(set_key("activation_function", "relu"),
                   {"config.json': activation_function is \"relu\", but adacc's GELU is GPT-2's gelu_new",
                    "openai-community/gpt2"});
    expect_refused(set_key("architectures", json::array({"GPT2Model"})),
                   {"architectures is [\"GPT2Model\"], but adacc reads [\"GPT2LMHeadModel\"]"});
    expect_refused(set_key("model_type", "llama"), {"model_type is \"llama\", but adacc reads \"gpt2\""});
    expect_refused(set_key("n_inner", 64), {"n_inner is 64, but adacc's MLP is 4 x n_embd = 32 wide"});
    expect_refused(set_key("layer_norm_epsilon", 1e-6),
                   {"layer_norm_epsilon is 1e-06, but adacc's layernorms use 1e-5"});
    expect_refused(set_key("tie_word_embeddings", false),
                   {"tie_word_embeddings is false, but adacc needs true (the output head is the token embedding)"});
    expect_refused(set_key("scale_attn_by_inverse_layer_idx", true), {"scale_attn_by_inverse_layer_idx is true"});
    expect_refused(set_key("n_layer", "two"), {"n_layer is \"two\", but it must be a positive integer"});
    expect_refused([](const fs::path& f) { std::ofstream(f / "config.json") << "{\"n_layer\": "; },
                   {"config.json' is not valid JSON"});
}

TEST_F(HfGpt2Errors, AShapeOtherThanTheRunsNamesConfigJsonsKeyAndTheSetFix) {
    // The run asks for 16 positions, the folder's n_positions is 8.
    expect_refused([](const fs::path&) {},
                   {"Hugging Face GPT-2 folder '", "holds a model of another shape than the config's [model]",
                    "model.max_seq_len: 8 in config.json (n_positions), 16 in the config", "--set model.max_seq_len=8"},
                   "--set model.max_seq_len=16 --set training.seq_len=8");
    // config.json and the weights disagree: n_positions 16 but wpe has 8 rows.
    expect_refused(set_key("n_positions", 16),
                   {"tensor 'wpe.weight' in '",
                    "model.safetensors' is [8, 8], but config.json's n_layer=2, n_embd=8, "
                    "n_head=2, n_positions=16, vocab_size=37 makes it [16, 8]",
                    "use the config.json that came with the weights"},
                   "--set model.max_seq_len=16");
}

TEST_F(HfGpt2Errors, MissingExtraOrUntiedTensorsAreNamed) {
    const auto weights = [](const std::function<void(Tensors&)>& edit) {
        return [edit](const fs::path& folder) { rewrite(folder / "model.safetensors", edit); };
    };
    expect_refused(weights([](Tensors& t) { t.erase("h.1.mlp.c_fc.bias"); }),
                   {"has no tensor 'h.1.mlp.c_fc.bias' [32], which GPT2LMHeadModel has for config.json's n_layer=2",
                    "download the folder again"});
    expect_refused(weights([](Tensors& t) {
                       t["h.2.ln_1.weight"] = {{8}, std::vector<float>(8, 1.0f)};
                   }),
                   {"holds 1 tensor(s) that GPT2LMHeadModel with config.json's n_layer=2",
                    "does not have: 'h.2.ln_1.weight' [8]", "use the config.json that came with them"});
    expect_refused(weights([](Tensors& t) {
                       t["lm_head.weight"] = t["wte.weight"];
                       t["lm_head.weight"].second[9] += 1.0f;  // row 1, column 1
                   }),
                   {"lm_head.weight differs from its token embedding wte (row 1, column 1", "its head is not tied"});
    expect_refused(weights([](Tensors& t) {
                       t["h.0.attn.c_proj.weight"].first = {4, 16};
                   }),
                   {"tensor 'h.0.attn.c_proj.weight' in '", "is [4, 16], but config.json's", "makes it [8, 8]"});
    expect_refused([](const fs::path& f) { fs::remove(f / "model.safetensors"); },
                   {"has neither model.safetensors nor model.safetensors.index.json", "not pytorch_model.bin"});
    // A tied head equal to wte, and the Hub's mask buffers, are accepted.
    fs::copy(fixture, dir / "tied");
    rewrite(dir / "tied" / "model.safetensors", [](Tensors& t) { t["lm_head.weight"] = t["wte.weight"]; });
    EXPECT_TRUE(same_bits(hf_params(dir / "tied", shape), hf_params(fixture, shape)));
}

TEST_F(HfGpt2Errors, ShardIndexesThatDisagreeWithTheirShardsAreRefused) {
    const auto index = [](const std::function<void(json&)>& edit) {
        return [edit](const fs::path& folder) {
            fs::remove(folder / "model.safetensors");
            for (const auto& e : fs::directory_iterator(test::fixtures_dir() / "hf_gpt2_tiny_sharded"))
                fs::copy(e.path(), folder / e.path().filename(), fs::copy_options::overwrite_existing);
            json j = json::parse(test::read_bytes(folder / "model.safetensors.index.json"));
            edit(j);
            std::ofstream(folder / "model.safetensors.index.json") << j.dump();
        };
    };
    expect_refused(
        index([](json& j) { j["weight_map"]["transformer.wte.weight"] = "model-00001-of-00002.safetensors"; }),
        {"puts 'transformer.wte.weight' in \"model-00001-of-00002.safetensors\", which does not hold it"});
    expect_refused(index([](json& j) { j["weight_map"]["transformer.wte.weight"] = "../model.safetensors"; }),
                   {"not the name of a file beside it"});
    expect_refused(index([](json& j) { j["weight_map"].erase("transformer.wpe.weight"); }),
                   {"holds 'transformer.wpe.weight', which", "does not list"});
    expect_refused(index([](json& j) { j.erase("weight_map"); }), {"has no \"weight_map\" object"});
}

TEST_F(HfGpt2Errors, CommandLineMisuseIsRefused) {
    const auto expect_error = [](const test::ProcessResult& r, const std::string& fragment) {
        EXPECT_EQ(r.status, 2) << r.output;
        EXPECT_NE(r.output.find(fragment), std::string::npos) << r.output;
    };
    expect_error(run_adacc("sample --hf-model " + (dir / "absent").string() + " --vocab x --prompt hi"),
                 "is not a Hugging Face model folder: it has no config.json");
    expect_error(
        run_adacc("train --config " + config.string() + " --init-from " + (fixture / "model.safetensors").string()),
        "it is part of a Hugging Face model: pass the folder that holds it");
    expect_error(run_adacc("sample --hf-model " + fixture.string() + " --checkpoint x --vocab x --prompt hi"),
                 "excludes");
    ASSERT_EQ(run_adacc("train --config " + config.string() + " --set logging.run_dir=" + (dir / "a").string()).status,
              0);
    expect_error(run_adacc("export --checkpoint " + (dir / "a").string()), "needs one of --llmc-model OUT");
    expect_error(run_adacc("export --checkpoint " + (dir / "a").string() + " --llmc-model x.bin --vocab v"),
                 "--vocab goes with --hf-model");
    expect_error(run_adacc("export --checkpoint " + (dir / "a").string() + " --hf-model " + (dir / "a").string()),
                 "holds an adacc run (config.toml, checkpoints/): write the Hugging Face folder elsewhere");
    EXPECT_FALSE(fs::exists(dir / "a" / "config.json"));
    std::ofstream(dir / "a_file") << "x";
    expect_error(run_adacc("export --checkpoint " + (dir / "a").string() + " --hf-model " + (dir / "a_file").string()),
                 "cannot make the folder '" + (dir / "a_file").string() + "'");
}

}  // namespace
}  // namespace adacc
