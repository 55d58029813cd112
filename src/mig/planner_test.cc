// Tests of the MIG planner: the start-slot rule for every profile and slot, the published
// instance counts against what the rules allow, valid and invalid mixes per model with their
// messages, every feasible mix against an independent brute-force placement, and Fit against a
// brute-force assignment of random request lists.
#include "mig/planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

namespace tessera::mig {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const GpuModel& Model(std::string_view name) { return *FindGpuModel(name).value(); }

ProfileCounts Counts(const GpuModel& m, std::vector<std::string> args) {
  auto c = ParseProfileCounts(m, args);
  EXPECT_TRUE(c.ok()) << c.error();
  return c.ok() ? *c : ProfileCounts{};
}

// ---- An independent brute force (no shared code with planner.cc beyond the tables) ----------

// Can instances `items` (profile indices) all be placed? Tries every start of every instance in
// turn, without the planner's ordering or symmetry pruning.
bool BruteFeasible(const GpuModel& m, std::vector<int> items) {
  int media = 0, compute = 0;
  for (int i : items) {
    media += m.profiles[i].media_extensions ? 1 : 0;
    compute += m.profiles[i].compute_slices;
  }
  if (media > 1 || compute > m.compute_slices) return false;
  std::vector<bool> taken(static_cast<size_t>(m.memory_slices), false);
  std::function<bool(size_t)> go = [&](size_t k) {
    if (k == items.size()) return true;
    const MigProfile& p = m.profiles[items[k]];
    for (int s = 0; s < m.memory_slices; ++s) {
      if (((p.start_mask >> s) & 1u) == 0 || s + p.memory_slices > m.memory_slices) continue;
      bool free = true;
      for (int j = s; j < s + p.memory_slices; ++j) free = free && !taken[static_cast<size_t>(j)];
      if (!free) continue;
      for (int j = s; j < s + p.memory_slices; ++j) taken[static_cast<size_t>(j)] = true;
      const bool ok = go(k + 1);
      for (int j = s; j < s + p.memory_slices; ++j) taken[static_cast<size_t>(j)] = false;
      if (ok) return true;
    }
    return false;
  };
  return go(0);
}

bool BruteFeasible(const GpuModel& m, const ProfileCounts& c) {
  std::vector<int> items;
  for (int i = 0; i < m.profile_count; ++i) {
    for (int n = 0; n < c[i]; ++n) items.push_back(i);
  }
  return BruteFeasible(m, items);
}

// Every count vector with each count up to 8 (more never fits) whose brute-force check passes.
std::set<ProfileCounts> BruteFeasibleMixes(const GpuModel& m) {
  std::set<ProfileCounts> out;
  ProfileCounts c{};
  std::function<void(int, int)> go = [&](int i, int slices) {
    if (i == m.profile_count) {
      if (BruteFeasible(m, c)) out.insert(c);
      return;
    }
    for (int n = 0; slices + n * m.profiles[i].memory_slices <= m.memory_slices; ++n) {
      c[i] = n;
      go(i + 1, slices + n * m.profiles[i].memory_slices);
    }
    c[i] = 0;
  };
  go(0, 0);
  return out;
}

// ---- The rules ---------------------------------------------------------------------------------

TEST(MigPlanner, EveryStartSlotRule) {
  for (const GpuModel& m : GpuModels()) {
    for (const MigProfile& p : m.Profiles()) {
      for (int s = -1; s <= m.memory_slices; ++s) {
        const Layout one{&m, {{&p, s}}};
        const bool allowed = s >= 0 && s < m.memory_slices && ((p.start_mask >> s) & 1u) != 0;
        EXPECT_EQ(CheckLayout(one).ok(), allowed) << m.name << " " << p.name << "@" << s;
        if (!allowed) {
          EXPECT_THAT(CheckLayout(one).message(), HasSubstr("may start only at memory slices"));
        }
      }
    }
  }
  // The H100 start slots spelled out, as nvidia-smi mig -lgipp prints them.
  const GpuModel& h = Model("H100-80GB");
  auto starts = [&](std::string_view name) {
    std::vector<int> out;
    const MigProfile& p = *FindProfile(h, name, "p").value();
    for (int s = 0; s < 8; ++s) {
      if (CheckLayout({&h, {{&p, s}}}).ok()) out.push_back(s);
    }
    return out;
  };
  EXPECT_EQ(starts("1g.10gb"), (std::vector<int>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(starts("1g.20gb"), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(starts("2g.20gb"), (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(starts("3g.40gb"), (std::vector<int>{0, 4}));
  EXPECT_EQ(starts("4g.40gb"), (std::vector<int>{0}));
  EXPECT_EQ(starts("7g.80gb"), (std::vector<int>{0}));
}

// The published "instances per GPU" follow from the start slots and the one-+me rule: it is the
// largest count of that profile alone that the rules place, and one more never fits.
TEST(MigPlanner, PublishedCountsFollowFromTheStartSlots) {
  for (const GpuModel& m : GpuModels()) {
    std::map<int, int> max_alone;
    for (const Layout& l : FeasibleLayouts(m)) {
      const ProfileCounts c = l.Counts();
      for (int i = 0; i < m.profile_count; ++i) {
        if (TotalInstances(c) == c[i]) max_alone[i] = std::max(max_alone[i], c[i]);
      }
    }
    for (int i = 0; i < m.profile_count; ++i) {
      const MigProfile& p = m.profiles[i];
      SCOPED_TRACE(std::string(m.name) + " " + std::string(p.name));
      EXPECT_EQ(max_alone[i], p.published_max);
      ProfileCounts c{};
      c[i] = p.published_max;
      auto placed = Place(m, c);
      ASSERT_TRUE(placed.ok()) << placed.error();
      EXPECT_TRUE(CheckLayout(*placed).ok());
      c[i] = p.published_max + 1;
      auto over = Place(m, c);
      ASSERT_FALSE(over.ok());
      EXPECT_THAT(over.error(), HasSubstr("at most " + std::to_string(p.published_max) +
                                          " fit on one GPU (start slots " + StartSlots(p)));
    }
  }
}

// Compute slices never bind on their own: every mix whose memory slices fit the start rules also
// fits the compute slices (so the compute check is a guard, never the reason a mix fails).
TEST(MigPlanner, ComputeLimitIsImpliedByTheMemoryRules) {
  for (const GpuModel& m : GpuModels()) {
    for (const Layout& l : FeasibleLayouts(m)) {
      EXPECT_LE(l.UsedComputeSlices(), m.compute_slices) << m.name << " " << FormatPlacements(l);
    }
  }
}

TEST(MigPlanner, FeasibleLayoutsAreExactlyTheBruteForceMixes) {
  for (const GpuModel& m : GpuModels()) {
    SCOPED_TRACE(std::string(m.name));
    std::set<ProfileCounts> planner;
    for (const Layout& l : FeasibleLayouts(m)) {
      EXPECT_TRUE(CheckLayout(l).ok()) << FormatPlacements(l);
      EXPECT_TRUE(planner.insert(l.Counts()).second) << "duplicate " << FormatPlacements(l);
      auto placed = Place(m, l.Counts());
      ASSERT_TRUE(placed.ok()) << placed.error();
      EXPECT_EQ(placed->Counts(), l.Counts());
      EXPECT_TRUE(CheckLayout(*placed).ok());
    }
    EXPECT_EQ(planner, BruteFeasibleMixes(m));
    EXPECT_GT(planner.size(), 10u);
  }
}

// On NVIDIA's tables the totals decide: a mix (each count up to one over its maximum) fits on an
// empty GPU exactly when no profile is over its published count, at most one instance has media
// extensions and the memory and compute slices add up; the start slots then always leave a
// placement. (They still matter for adding to a GPU whose instances cannot move: FirstFreeStart.)
// Every refusal names one of those totals.
TEST(MigPlanner, OnNvidiasTablesAMixFitsIffItsTotalsFit) {
  for (const GpuModel& m : GpuModels()) {
    ProfileCounts c{};
    int mixes = 0;
    std::function<void(int)> go = [&](int i) {
      if (i == m.profile_count) {
        if (TotalInstances(c) == 0) return;
        ++mixes;
        int memory = 0, compute = 0, media = 0;
        bool counts_ok = true;
        for (int k = 0; k < m.profile_count; ++k) {
          memory += c[k] * m.profiles[k].memory_slices;
          compute += c[k] * m.profiles[k].compute_slices;
          media += m.profiles[k].media_extensions ? c[k] : 0;
          counts_ok = counts_ok && c[k] <= m.profiles[k].published_max;
        }
        const bool totals_fit =
            counts_ok && media <= 1 && memory <= m.memory_slices && compute <= m.compute_slices;
        auto placed = Place(m, c);
        EXPECT_EQ(placed.ok(), totals_fit) << m.name << " " << FormatCounts(m, c);
        EXPECT_EQ(placed.ok(), BruteFeasible(m, c)) << m.name << " " << FormatCounts(m, c);
        if (!placed.ok()) {
          EXPECT_THAT(placed.error(), HasSubstr("no placement of " + FormatCounts(m, c)));
          EXPECT_THAT(placed.error(), Not(HasSubstr("The largest part that fits")));
        }
        return;
      }
      for (int n = 0; n <= m.profiles[i].published_max + 1; ++n) {
        c[i] = n;
        go(i + 1);
      }
      c[i] = 0;
    };
    go(0);
    EXPECT_GT(mixes, 100) << m.name;
  }
}

// A model whose start slots, not its totals, refuse a mix (none of NVIDIA's does): 1g may start
// at 0 or 2 and 2g only at 1, so 2g + two 1g take 4 of 4 slices and still do not fit.
TEST(MigPlanner, StartSlotRefusalNamesTheLargestPartThatFits) {
  const GpuModel odd{"Odd-4",
                     "a made-up 4-slice GPU",
                     "",
                     4,
                     4,
                     {{"1g.1gb", 1, kNvmlGiProfile1Slice, 1, 1, 0x5, 2, false},
                      {"2g.2gb", 2, kNvmlGiProfile2Slice, 2, 2, 0x2, 1, false}},
                     2};
  ProfileCounts c{};
  c[0] = 2;
  c[1] = 1;
  auto placed = Place(odd, c);
  ASSERT_FALSE(placed.ok());
  EXPECT_EQ(placed.error(),
            "no placement of 1g.1gb=2 2g.2gb=1 on one Odd-4: the start slots leave no room for all "
            "of them; 1g.1gb starts at {0,2} and takes 1; 2g.2gb starts at {1} and takes 2 memory "
            "slices. The largest part that fits: 1g.1gb@0 2g.2gb@1");
  EXPECT_FALSE(BruteFeasible(odd, c));
}

// ---- Valid and invalid mixes per model ----------------------------------------------------------

TEST(MigPlanner, ValidMixes) {
  struct Case {
    std::string_view model;
    std::vector<std::string> request;
    std::string_view placements;
  };
  const std::vector<Case> cases = {
      {"H100-80GB", {"1g.10gb=3", "3g.40gb=1"}, "3g.40gb@0 1g.10gb@4 1g.10gb@5 1g.10gb@6"},
      {"H100-80GB", {"4g.40gb", "3g.40gb"}, "4g.40gb@0 3g.40gb@4"},
      {"H100-80GB", {"3g.40gb=2"}, "3g.40gb@0 3g.40gb@4"},
      {"H100-80GB", {"2g.20gb=3", "1g.10gb"}, "2g.20gb@0 2g.20gb@2 2g.20gb@4 1g.10gb@6"},
      {"H100-80GB", {"1g.20gb=4"}, "1g.20gb@0 1g.20gb@2 1g.20gb@4 1g.20gb@6"},
      {"H100-80GB",
       {"1g.10gb+me", "1g.10gb=6"},
       "1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb+me@6"},
      {"H100-80GB", {"7g.80gb"}, "7g.80gb@0"},
      // 3g at 0 leaves room for three 1g only; the planner moves it to slot 4.
      {"H100-80GB", {"3g.40gb", "1g.10gb=4"}, "1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 3g.40gb@4"},
      // 3g at 0 would leave 2g@4 and one 1g@6 (1g may not start at 7): 3g goes to 4.
      {"A100-40GB", {"3g.20gb", "2g.10gb", "1g.5gb=2"}, "2g.10gb@0 1g.5gb@2 1g.5gb@3 3g.20gb@4"},
      {"A100-40GB", {"3g.20gb", "2g.10gb", "1g.5gb"}, "3g.20gb@0 2g.10gb@4 1g.5gb@6"},
      {"A100-40GB",
       {"2g.10gb", "1g.5gb=5"},
       "2g.10gb@0 1g.5gb@2 1g.5gb@3 1g.5gb@4 1g.5gb@5 1g.5gb@6"},
      {"H200-141GB",
       {"3g.71gb", "2g.35gb", "1g.18gb=2"},
       "2g.35gb@0 1g.18gb@2 1g.18gb@3 3g.71gb@4"},
      {"B200", {"4g.90gb", "1g.45gb=2"}, "4g.90gb@0 1g.45gb@4 1g.45gb@6"},
      {"H100-94GB",
       {"1g.12gb=7"},
       "1g.12gb@0 1g.12gb@1 1g.12gb@2 1g.12gb@3 1g.12gb@4 1g.12gb@5 1g.12gb@6"},
      {"A30", {"2g.12gb=2"}, "2g.12gb@0 2g.12gb@2"},
      {"A30", {"1g.6gb=2", "2g.12gb"}, "2g.12gb@0 1g.6gb@2 1g.6gb@3"},
      {"A30", {"1g.6gb+me", "1g.6gb=3"}, "1g.6gb@0 1g.6gb@1 1g.6gb@2 1g.6gb+me@3"},
      {"A30", {"4g.24gb"}, "4g.24gb@0"},
  };
  for (const Case& c : cases) {
    const GpuModel& m = Model(c.model);
    auto placed = Place(m, Counts(m, c.request));
    ASSERT_TRUE(placed.ok()) << c.model << ": " << placed.error();
    EXPECT_EQ(FormatPlacements(*placed), c.placements) << c.model;
    EXPECT_TRUE(CheckLayout(*placed).ok());
  }
}

TEST(MigPlanner, InvalidMixesSayWhy) {
  const GpuModel& h = Model("H100-80GB");
  auto why = [&](const GpuModel& m, std::vector<std::string> request) {
    auto placed = Place(m, Counts(m, request));
    EXPECT_FALSE(placed.ok()) << FormatPlacements(*placed);
    return placed.ok() ? std::string() : placed.error();
  };
  EXPECT_EQ(why(h, {"3g.40gb=2", "1g.10gb"}),
            "no placement of 1g.10gb=1 3g.40gb=2 on one H100-80GB: they take 9 memory slices "
            "(1g.10gb 1x1 + 3g.40gb 2x4) and the GPU has 8");
  EXPECT_EQ(why(h, {"4g.40gb", "2g.20gb=2"}),
            "no placement of 2g.20gb=2 4g.40gb=1 on one H100-80GB: they take 8 compute slices "
            "(2g.20gb 2x2 + 4g.40gb 1x4) and the GPU has 7");
  EXPECT_EQ(why(h, {"1g.10gb+me=2"}),
            "no placement of 1g.10gb+me=2 on one H100-80GB: 1g.10gb+me=2 but at most 1 fit on "
            "one GPU (start slots {0,1,2,3,4,5,6}, 1 memory slice each, and only one instance "
            "per GPU may have media extensions)");
  EXPECT_EQ(why(h, {"4g.40gb=2"}),
            "no placement of 4g.40gb=2 on one H100-80GB: 4g.40gb=2 but at most 1 fit on one GPU "
            "(start slots {0}, 4 memory slices each)");
  const GpuModel& a30 = Model("A30");
  EXPECT_EQ(why(a30, {"1g.6gb+me", "2g.12gb+me"}),
            "no placement of 1g.6gb+me=1 2g.12gb+me=1 on one A30: 2 instances with media "
            "extensions (+me), but one GPU has room for one");
  EXPECT_THAT(why(a30, {"1g.6gb=3", "2g.12gb"}), HasSubstr("they take 5 memory slices"));
  EXPECT_THAT(why(Model("B200"), {"7g.180gb", "1g.23gb"}), HasSubstr("they take 9 memory slices"));
}

TEST(MigPlanner, CheckLayoutRefusesBrokenLayouts) {
  const GpuModel& h = Model("H100-80GB");
  auto p = [&](std::string_view name) { return FindProfile(h, name, "p").value(); };
  EXPECT_EQ(CheckLayout({&h, {{p("3g.40gb"), 0}, {p("1g.10gb"), 3}}}).message(),
            "1g.10gb@3: overlaps another instance's memory slices");
  EXPECT_EQ(CheckLayout({&h, {{p("1g.10gb+me"), 0}, {p("1g.10gb+me"), 1}}}).message(),
            "1g.10gb+me@1: at most one instance per GPU has media extensions (+me)");
  EXPECT_EQ(CheckLayout({&h, {{p("3g.40gb"), 2}}}).message(),
            "3g.40gb@2: 3g.40gb may start only at memory slices {0,4}");
  EXPECT_EQ(CheckLayout(
                {&h, {{p("4g.40gb"), 0}, {p("2g.20gb"), 4}, {p("1g.10gb"), 6}, {p("1g.10gb"), 7}}})
                .message(),
            "1g.10gb@7: 1g.10gb may start only at memory slices {0,1,2,3,4,5,6}");
}

TEST(MigPlanner, FirstFreeStart) {
  const GpuModel& h = Model("H100-80GB");
  auto p = [&](std::string_view name) -> const MigProfile& {
    return *FindProfile(h, name, "p").value();
  };
  const Layout l{&h, {{&p("3g.40gb"), 0}, {&p("1g.10gb"), 4}}};
  EXPECT_EQ(FirstFreeStart(l, p("1g.10gb")), 5);
  EXPECT_EQ(FirstFreeStart(l, p("1g.20gb")), 6);
  EXPECT_EQ(FirstFreeStart(l, p("2g.20gb")), -1);  // 2g may not start at 5 or 6
  EXPECT_EQ(FirstFreeStart(l, p("3g.40gb")), -1);
}

TEST(MigPlanner, ParseProfileCounts) {
  const GpuModel& h = Model("H100-80GB");
  EXPECT_EQ(FormatCounts(h, Counts(h, {"1g.10gb=3", "3g.40gb", "1g.10gb=2"})),
            "1g.10gb=5 3g.40gb=1");
  auto bad = [&](std::vector<std::string> args) {
    auto c = ParseProfileCounts(h, args);
    return c.ok() ? std::string("ok") : c.error();
  };
  EXPECT_EQ(bad({"1g.10gb=x"}),
            "1g.10gb=\"x\": not a number; expected an instance count from 0 to 64");
  EXPECT_THAT(bad({"1g.10gb=65"}), HasSubstr("expected an instance count from 0 to 64"));
  EXPECT_THAT(bad({"=3"}), HasSubstr("instance profile=\"\": not a MIG profile of the H100-80GB"));
  EXPECT_THAT(bad({"2g.10gb=1"}), HasSubstr("expected one of the H100-80GB profiles: 1g.10gb"));
}

TEST(MigPlanner, SliceMapAndFormats) {
  const GpuModel& h = Model("H100-80GB");
  auto placed = Place(h, Counts(h, {"1g.10gb=2", "3g.40gb=1"}));
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(SliceMap(*placed), "0-3 3g.40gb | 4 1g.10gb | 5 1g.10gb | 6-7 free");
  EXPECT_EQ(SliceMap(Layout{&h, {}}), "0-7 free");
  EXPECT_EQ(FormatPlacements(Layout{&h, {}}), "empty");
  EXPECT_EQ(FormatCounts(h, ProfileCounts{}), "nothing");
}

// ---- Fit ----------------------------------------------------------------------------------------

// The best (instances served, memory slices served) over every assignment of each request to a
// GPU or to none, each GPU checked by the brute-force placement.
std::pair<int, int> BruteBestFit(const GpuModel& m, int gpus, const std::vector<int>& requests) {
  std::map<ProfileCounts, bool> feasible;
  auto ok = [&](const ProfileCounts& c) {
    auto it = feasible.find(c);
    if (it != feasible.end()) return it->second;
    return feasible[c] = BruteFeasible(m, c);
  };
  std::pair<int, int> best{0, 0};
  std::vector<ProfileCounts> per_gpu(static_cast<size_t>(gpus));
  std::function<void(size_t, int, int)> go = [&](size_t k, int served, int slices) {
    if (k == requests.size()) {
      best = std::max(best, std::make_pair(served, slices));
      return;
    }
    go(k + 1, served, slices);  // not served
    for (int g = 0; g < gpus; ++g) {
      ProfileCounts& c = per_gpu[static_cast<size_t>(g)];
      ++c[requests[k]];
      if (ok(c)) go(k + 1, served + 1, slices + m.profiles[requests[k]].memory_slices);
      --c[requests[k]];
    }
  };
  go(0, 0, 0);
  return best;
}

void ExpectValidFit(const GpuModel& m, const FitResult& r, int gpus) {
  ASSERT_EQ(static_cast<int>(r.gpus.size()), gpus);
  ProfileCounts sum{};
  for (const Layout& l : r.gpus) {
    EXPECT_TRUE(CheckLayout(l).ok()) << FormatPlacements(l);
    const ProfileCounts c = l.Counts();
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += c[i];
  }
  EXPECT_EQ(sum, r.served);
  for (size_t i = 0; i < sum.size(); ++i) EXPECT_LE(r.served[i], r.requested[i]);
}

TEST(MigPlanner, FitMatchesBruteForceOnRandomRequests) {
  const uint32_t seed = 20261123;
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  const auto models = GpuModels();
  int cases = 0, partial = 0;
  for (int round = 0; round < 300; ++round) {
    const GpuModel& m = models[rng() % models.size()];
    const int gpus = 1 + static_cast<int>(rng() % 2);
    const int n = 1 + static_cast<int>(rng() % (gpus == 1 ? 10 : 8));
    std::vector<int> requests;
    ProfileCounts requested{};
    for (int k = 0; k < n; ++k) {
      // Small profiles more often, as real request lists have them.
      const int i = static_cast<int>(std::min(rng() % m.profile_count, rng() % m.profile_count));
      requests.push_back(i);
      ++requested[i];
    }
    const FitResult r = Fit(m, gpus, requested);
    const auto brute = BruteBestFit(m, gpus, requests);
    SCOPED_TRACE(std::string(m.name) + " x" + std::to_string(gpus) + " " +
                 FormatCounts(m, requested));
    EXPECT_TRUE(r.exact);
    EXPECT_EQ(TotalInstances(r.served), brute.first);
    int slices = 0;
    for (const Layout& l : r.gpus) slices += l.UsedMemorySlices();
    EXPECT_EQ(slices, brute.second);
    ExpectValidFit(m, r, gpus);
    ++cases;
    partial += brute.first < n ? 1 : 0;
  }
  EXPECT_EQ(cases, 300);
  EXPECT_GT(partial, 30);  // the random lists do test choosing, not only fitting everything
}

TEST(MigPlanner, FitOverItsStateBudgetStillGivesValidLayouts) {
  const GpuModel& h = Model("H100-80GB");
  const ProfileCounts req = Counts(h, {"1g.10gb=20", "2g.20gb=6", "3g.40gb=5", "1g.20gb=4"});
  const FitResult exact = Fit(h, 6, req);
  EXPECT_TRUE(exact.exact);
  ExpectValidFit(h, exact, 6);
  const FitResult budget = Fit(h, 6, req, /*max_states=*/5);
  EXPECT_FALSE(budget.exact);
  ExpectValidFit(h, budget, 6);
  EXPECT_LE(TotalInstances(budget.served), TotalInstances(exact.served));
  // 6 GPUs hold at most 42 compute slices; the request asks for 20+12+15+4 = 51 instances' worth.
  EXPECT_GE(TotalInstances(exact.served), TotalInstances(budget.served));
}

TEST(MigPlanner, FitServesEverythingThatFits) {
  const GpuModel& h = Model("H100-80GB");
  const FitResult r = Fit(h, 2, Counts(h, {"4g.40gb=2", "3g.40gb=2"}));
  EXPECT_EQ(TotalInstances(r.served), 4);
  EXPECT_EQ(FormatPlacements(r.gpus[0]), "4g.40gb@0 3g.40gb@4");
  EXPECT_EQ(FormatPlacements(r.gpus[1]), "4g.40gb@0 3g.40gb@4");
}

// ---- mig-parted -------------------------------------------------------------------------------

TEST(MigPlanner, MigPartedConfigOneLayoutForAllGpus) {
  const GpuModel& h = Model("H100-80GB");
  auto placed = Place(h, Counts(h, {"1g.10gb=3", "3g.40gb=1"}));
  ASSERT_TRUE(placed.ok());
  const std::vector<Layout> gpus = {*placed};
  const std::vector<std::string> comment = {"made by a test"};
  EXPECT_EQ(MigPartedConfig(gpus, "tessera", comment),
            "# made by a test\n"
            "version: v1\n"
            "mig-configs:\n"
            "  tessera:\n"
            "    - devices: all\n"
            "      mig-enabled: true\n"
            "      mig-devices:\n"
            "        \"1g.10gb\": 3\n"
            "        \"3g.40gb\": 1\n");
}

TEST(MigPlanner, MigPartedConfigGroupsGpusWithTheSameMix) {
  const GpuModel& h = Model("H100-80GB");
  const Layout a = Place(h, Counts(h, {"3g.40gb=2"})).value();
  const Layout b = Place(h, Counts(h, {"1g.10gb+me", "7g.80gb=0"})).value();
  const std::vector<Layout> gpus = {a, b, a, Layout{&h, {}}};
  EXPECT_EQ(MigPartedConfig(gpus, "mixed", {}),
            "version: v1\n"
            "mig-configs:\n"
            "  mixed:\n"
            "    - devices: [0, 2]\n"
            "      mig-enabled: true\n"
            "      mig-devices:\n"
            "        \"3g.40gb\": 2\n"
            "    - devices: [1]\n"
            "      mig-enabled: true\n"
            "      mig-devices:\n"
            "        \"1g.10gb+me\": 1\n"
            "    - devices: [3]\n"
            "      mig-enabled: true\n"
            "      mig-devices: {}\n");
  EXPECT_TRUE(ValidConfigName("all-balanced.v2", "--config-name").ok());
  EXPECT_EQ(ValidConfigName("a b", "--config-name").message(),
            "--config-name=\"a b\": not a config name; expected 1-63 characters of "
            "[A-Za-z0-9_.-]");
}

}  // namespace
}  // namespace tessera::mig
