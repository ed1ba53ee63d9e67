// The lp_solve adapter (src/adacc/lp_solve_model.h): the only file that includes lp_solve.
#include "src/adacc/lp_solve_model.h"

#include <cmath>
#include <stdexcept>

#include <lpsolve/lp_lib.h>

namespace adacc::lp {

namespace {

int __WINAPI abort_if_late(lprec*, void* handle) {
    auto* d = static_cast<Deadline*>(handle);
    if (Clock::now() >= d->end) d->fired = true;
    return d->fired ? TRUE : FALSE;
}

// A new lp_solve model, quiet.
lprec* make_quiet_lp(int columns) {
    lprec* lp = make_lp(0, columns);
    if (!lp) throw std::runtime_error("lp_solve: make_lp failed");
    set_verbose(lp, NEUTRAL);
    char none[] = "";
    set_outputfile(lp, none);
    return lp;
}

int lp_row_type(RowType type) {
    switch (type) {
        case RowType::le: return LE;
        case RowType::ge: return GE;
        case RowType::eq: return EQ;
    }
    throw std::logic_error("lp_solve: unknown row type");
}

}  // namespace

void Model::Release::operator()(_lprec* lp) const { delete_lp(lp); }

Model::Model(const std::vector<Column>& cols, const std::vector<Row>& rows, const std::vector<double>& objective,
             const std::vector<double>& memory, double memory_rhs)
    : lp_(make_quiet_lp(static_cast<int>(cols.size()))), ncols_(static_cast<int>(cols.size())) {
    lprec* lp = lp_.get();
    std::vector<int> colno;
    std::vector<double> val;
    for (int j = 0; j < ncols_; ++j) {
        set_bounds(lp, j + 1, cols[j].lb, cols[j].ub);
        if (cols[j].integer) set_int(lp, j + 1, TRUE);
    }
    for (int j = 0; j < ncols_; ++j)
        if (objective[j] != 0) colno.push_back(j + 1), val.push_back(objective[j]);
    set_obj_fnex(lp, static_cast<int>(colno.size()), val.data(), colno.data());
    set_minim(lp);
    set_add_rowmode(lp, TRUE);
    for (const Row& r : rows) {
        colno.clear();
        for (int j : r.idx) colno.push_back(j + 1);
        std::vector<double> v = r.val;
        add_constraintex(lp, static_cast<int>(colno.size()), v.data(), colno.data(), lp_row_type(r.type), r.rhs);
    }
    colno.clear();
    val.clear();
    for (int j = 0; j < ncols_; ++j)
        if (memory[j] != 0) colno.push_back(j + 1), val.push_back(memory[j]);
    add_constraintex(lp, static_cast<int>(colno.size()), val.data(), colno.data(), LE, memory_rhs);
    memory_row_ = static_cast<int>(rows.size()) + 1;
    set_add_rowmode(lp, FALSE);
}

void Model::set_memory_rhs(double rhs) { set_rh(lp_.get(), memory_row_, rhs); }

Model::Outcome Model::solve(Deadline& deadline, const PlannerOptions& o, std::vector<double>& x, int& solves) {
    const double remaining = deadline.remaining_s();
    if (remaining <= 0) {
        deadline.fired = true;
        return Outcome::failed;
    }
    lprec* lp = lp_.get();
    set_timeout(lp, static_cast<long>(std::ceil(remaining)));
    put_abortfunc(lp, abort_if_late, &deadline);
    set_mip_gap(lp, TRUE, o.mip_gap_abs);
    set_mip_gap(lp, FALSE, o.mip_gap_rel);
    ++solves;
    // lp_solve 5.5.2 prunes, with its default solution limit of 1, every node that does not
    // improve on the incumbent by a "minimum objective step" (lprec::bb_deltaOF) it derives
    // from the objective's coefficients (MIP_stepOF). With fractional costs that step is
    // bogus (0.0014 ms, even 1e30) and the optimum is skipped while OPTIMAL is reported; the
    // brute-force tests caught it. Any limit above 1 turns the step off (it only changes which
    // of several equal-cost optima is returned).
    set_solutionlimit(lp, 2);
    const int rc = ::solve(lp);
    Outcome out = Outcome::failed;
    if (rc == OPTIMAL || rc == PRESOLVED)
        out = Outcome::optimal;
    else if (rc == SUBOPTIMAL)
        // lp_solve also says SUBOPTIMAL when the MIP gap pruned the search; only a stop on
        // the deadline leaves the optimum unproven beyond the gap asked for.
        out = deadline.fired ? Outcome::suboptimal : Outcome::optimal;
    else if (rc == INFEASIBLE)
        out = Outcome::infeasible;
    // Should a later lp_solve compute the step anyway, the answer is not proven optimal.
    if (out == Outcome::optimal && lp->bb_deltaOF > 0) out = Outcome::suboptimal;
    if (out == Outcome::optimal || out == Outcome::suboptimal) {
        x.assign(ncols_, 0.0);
        if (ncols_ > 0) get_variables(lp, x.data());
    }
    return out;
}

Model::Fit Model::solve_to_fit(double rhs, double unit, Deadline& deadline, const PlannerOptions& o,
                               std::vector<double>& x, int& solves,
                               const std::function<std::optional<std::size_t>(const std::vector<double>&)>& overshoot) {
    Fit fit;
    for (int attempt = 0; attempt < kFitTries; ++attempt) {
        set_memory_rhs(rhs);
        fit.outcome = solve(deadline, o, x, solves);
        if (fit.outcome == Outcome::failed || fit.outcome == Outcome::infeasible) return fit;
        const std::optional<std::size_t> over = overshoot(x);
        if (!over) return fit;
        if (*over == 0) {
            fit.fits = true;
            return fit;
        }
        rhs -= std::ceil(static_cast<double>(*over) / unit);  // a whole unit at least
    }
    return fit;
}

}  // namespace adacc::lp
