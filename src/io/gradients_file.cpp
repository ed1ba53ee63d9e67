#include "src/io/gradients_file.h"

#include <array>
#include <cstring>
#include <stdexcept>

#include "models/gpt_params.h"
#include "src/common/file_io.h"

namespace adacc {

namespace {
constexpr int kHeaderInts = 256;
}

std::uint64_t save_gradients_file(const std::filesystem::path& file, const GradientsRecord& record) {
    const std::size_t tokens = static_cast<std::size_t>(record.B) * record.T;
    const std::size_t params = ParameterLayout(record.shape).total();
    // The caller's vectors come from one forward and backward of this shape: a mismatch is a bug.
    if (record.inputs->size() != tokens || record.targets->size() != tokens || record.gradients->size() != params)
        throw std::logic_error("save_gradients_file: the batch or the gradients do not match B x T and the model");
    std::array<std::int32_t, kHeaderInts> header{};
    header[0] = kGradientsFileMagic;
    header[1] = kGradientsFileVersion;
    header[2] = record.B;
    header[3] = record.T;
    header[4] = record.shape.max_seq_len;
    header[5] = record.shape.vocab_size;
    header[6] = record.shape.n_layer;
    header[7] = record.shape.n_head;
    header[8] = record.shape.n_embd;
    header[9] = record.shape.padded_vocab_size();
    header[10] = record.device == Device::cuda ? 1 : 0;
    header[11] = record.activation == DType::bf16 ? 1 : 0;
    std::memcpy(&header[12], &record.loss, sizeof(float));
    static_assert(sizeof(int) == sizeof(std::int32_t), "token ids are written as int32");
    create_parent_folders(file);
    AtomicFileWriter out(file);
    out.write(header.data(), sizeof(header));
    out.write(record.inputs->data(), tokens * sizeof(int));
    out.write(record.targets->data(), tokens * sizeof(int));
    out.write(record.gradients->data(), params * sizeof(float));
    out.commit();
    return out.size();
}

}  // namespace adacc
