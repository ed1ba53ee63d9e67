#include "src/engine/backend.h"

namespace adacc {

Arena::Arena(Backend& backend, std::size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    data_ = backend.allocate(bytes);
    backend_ = &backend;
}

Arena& Arena::operator=(Arena&& other) noexcept {
    if (this != &other) {
        reset();
        backend_ = std::exchange(other.backend_, nullptr);
        data_ = std::exchange(other.data_, nullptr);
        bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
}

void Arena::reset() {
    if (data_) backend_->release(data_);
    data_ = nullptr;
    backend_ = nullptr;
    bytes_ = 0;
}

}  // namespace adacc
