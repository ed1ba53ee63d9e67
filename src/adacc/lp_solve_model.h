// The lp_solve adapter: a mixed-integer program as plain columns and rows, solved by lp_solve 5.5
// within the planner call's deadline. lp_solve_model.cpp is the only file that includes lp_solve's
// headers, so its C API, its 1-based indexing and its quirks (see Model::solve) stay in one place;
// the block MILP, the frontier sweep and the layer-count program only build columns and rows.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "src/adacc/milp_planner.h"

struct _lprec;  // lp_solve's lprec (lpsolve/lp_types.h), opaque outside lp_solve_model.cpp

namespace adacc::lp {

using Clock = std::chrono::steady_clock;

// The whole call's time limit; lp_solve polls it through its abort callback.
struct Deadline {
    Clock::time_point end;
    bool fired = false;
    double remaining_s() const { return std::chrono::duration<double>(end - Clock::now()).count(); }
};
inline Deadline deadline_after(Clock::time_point start, double seconds) {
    return Deadline{start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds))};
}

struct Column {
    double lb = 0, ub = 1;
    bool integer = true;
};
enum class RowType { le, ge, eq };
struct Row {
    std::vector<int> idx;  // 0-based columns
    std::vector<double> val;
    RowType type;
    double rhs;
};

// Everything one lp_solve model needs: columns (with objective and memory coefficients), rows,
// and the memory row (always the last one added, number `memory_row` in lp_solve's 1-based rows).
// The model is minimised; its memory row reads sum memory_j x_j <= memory_rhs.
class Model {
public:
    Model(const std::vector<Column>& cols, const std::vector<Row>& rows, const std::vector<double>& objective,
          const std::vector<double>& memory, double memory_rhs);
    void set_memory_rhs(double rhs);

    enum class Outcome { optimal, suboptimal, infeasible, failed };
    // Solves within the deadline with the options' MIP gaps (counting the run in `solves`); x gets
    // the solution on optimal/suboptimal.
    Outcome solve(Deadline& deadline, const PlannerOptions& o, std::vector<double>& x, int& solves);

    // solve with the memory row at most `rhs` units of `unit` bytes, each answer checked exactly:
    // `overshoot(x)` is the bytes it needs beyond what it must fit (0: it fits), or nullopt when it
    // is unusable for another reason. lp_solve's tolerances can let an answer slip over (an integer
    // column 1e-7 off a whole number, times a coefficient of up to bytes / unit); then the row is
    // tightened by the overshoot, at least one unit, and solved again: kFitTries solves at most.
    // `fits`: the last answer fits (its outcome optimal or suboptimal). A failed or infeasible
    // outcome: lp_solve gave no answer.
    struct Fit {
        Outcome outcome = Outcome::failed;
        bool fits = false;
    };
    static constexpr int kFitTries = 4;
    Fit solve_to_fit(double rhs, double unit, Deadline& deadline, const PlannerOptions& o, std::vector<double>& x,
                     int& solves,
                     const std::function<std::optional<std::size_t>(const std::vector<double>&)>& overshoot);

private:
    struct Release {  // delete_lp, quietly owning the model
        void operator()(_lprec* lp) const;
    };
    std::unique_ptr<_lprec, Release> lp_;
    int ncols_;
    int memory_row_ = 0;
};

}  // namespace adacc::lp
