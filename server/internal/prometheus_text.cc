#include "server/internal/prometheus_text.h"

#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace regcache::server::internal {
namespace {

using base::stats::HistogramSnapshot;
using base::stats::Kind;
using base::stats::Sample;

constexpr absl::string_view kNanosSuffix = "_ns";

// Nanoseconds as seconds, exactly: 1500 -> "0.0000015", 2'000'000'000 -> "2".
std::string NanosAsSeconds(uint64_t ns) {
  std::string frac = absl::StrFormat("%09d", ns % 1'000'000'000);
  while (!frac.empty() && frac.back() == '0') frac.pop_back();
  return frac.empty() ? absl::StrCat(ns / 1'000'000'000)
                      : absl::StrCat(ns / 1'000'000'000, ".", frac);
}

// `cache{device="x"}` -> ("cache", `device="x"`).
std::pair<absl::string_view, absl::string_view> SplitComponent(absl::string_view component) {
  const size_t brace = component.find('{');
  if (brace == absl::string_view::npos || component.back() != '}') return {component, {}};
  return {component.substr(0, brace), component.substr(brace + 1, component.size() - brace - 2)};
}

std::string JoinLabels(absl::string_view a, absl::string_view b) {
  if (a.empty() && b.empty()) return "";
  if (a.empty()) return absl::StrCat("{", b, "}");
  if (b.empty()) return absl::StrCat("{", a, "}");
  return absl::StrCat("{", a, ",", b, "}");
}

// HELP text escapes `\` and newline.
std::string EscapeHelp(absl::string_view help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

uint64_t PlainBound(size_t i) { return uint64_t{1} << (2 * i); }

}  // namespace

std::string PrometheusText::FamilyName(const Sample& sample) {
  const absl::string_view component = SplitComponent(sample.component).first;
  std::string name = absl::StrCat("regcache_", component, "_", sample.name);
  switch (sample.kind) {
    case Kind::kCounter:
      if (!absl::EndsWith(name, "_total")) absl::StrAppend(&name, "_total");
      break;
    case Kind::kHistogram:
      if (absl::EndsWith(name, kNanosSuffix)) {
        name.resize(name.size() - kNanosSuffix.size());
        absl::StrAppend(&name, "_seconds");
      }
      break;
    case Kind::kGauge:
      break;
  }
  return name;
}

std::string PrometheusText::EscapeLabelValue(absl::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string PrometheusText::FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::trunc(value) && std::fabs(value) < 9.007199254740992e15) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  return absl::StrFormat("%.15g", value);
}

PrometheusText::Family* PrometheusText::SeriesOf(absl::string_view name, absl::string_view help,
                                                 absl::string_view type, absl::string_view labels) {
  auto [it, added] = index_.try_emplace(std::string(name), families_.size());
  if (added) families_.push_back(Family{std::string(name), std::string(help), std::string(type)});
  Family& f = families_[it->second];
  if (f.type != type) return nullptr;
  if (!f.label_sets.insert(std::string(labels)).second) return nullptr;
  return &f;
}

void PrometheusText::AddSeries(absl::string_view family, absl::string_view help,
                               absl::string_view type, absl::string_view labels,
                               absl::string_view value) {
  Family* f = SeriesOf(family, help, type, labels);
  if (f == nullptr) return;
  absl::StrAppend(&f->lines, family, JoinLabels(labels, ""), " ", value, "\n");
}

void PrometheusText::AddGauge(absl::string_view family, absl::string_view help,
                              absl::string_view labels, double value) {
  AddSeries(family, help, "gauge", labels, FormatValue(value));
}

void PrometheusText::AddCounter(absl::string_view family, absl::string_view help,
                                absl::string_view labels, double value) {
  AddSeries(family, help, "counter", labels, FormatValue(value));
}

void PrometheusText::AddHistogram(const std::string& family, absl::string_view help,
                                  absl::string_view labels, const HistogramSnapshot& h,
                                  bool nanoseconds) {
  Family* f = SeriesOf(family, help, "histogram", labels);
  if (f == nullptr) return;
  const size_t bounds = nanoseconds ? kSecondsBoundsNs.size() : kPlainBuckets;
  // Internal buckets ascend, so one pass moves them into the exposition buckets in order.
  int b = 0;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds; ++i) {
    const uint64_t bound = nanoseconds ? kSecondsBoundsNs[i] : PlainBound(i);
    while (b < HistogramSnapshot::kBuckets && HistogramSnapshot::BucketUpperBound(b) <= bound) {
      cumulative += h.buckets[b++];
    }
    const std::string le = nanoseconds ? NanosAsSeconds(bound) : absl::StrCat(bound);
    absl::StrAppend(&f->lines, family, "_bucket",
                    JoinLabels(labels, absl::StrCat("le=\"", le, "\"")), " ", cumulative, "\n");
  }
  absl::StrAppend(&f->lines, family, "_bucket", JoinLabels(labels, "le=\"+Inf\""), " ", h.count,
                  "\n");
  absl::StrAppend(&f->lines, family, "_sum", JoinLabels(labels, ""), " ",
                  nanoseconds ? NanosAsSeconds(h.sum) : absl::StrCat(h.sum), "\n");
  absl::StrAppend(&f->lines, family, "_count", JoinLabels(labels, ""), " ", h.count, "\n");
}

void PrometheusText::AddStats(const std::vector<Sample>& samples) {
  for (const Sample& s : samples) {
    const std::string family = FamilyName(s);
    const absl::string_view labels = SplitComponent(s.component).second;
    switch (s.kind) {
      case Kind::kCounter:
        // Exactly, as the unsigned count the stat holds.
        AddSeries(family, s.help, "counter", labels, absl::StrCat(static_cast<uint64_t>(s.value)));
        break;
      case Kind::kGauge:
        AddSeries(family, s.help, "gauge", labels, absl::StrCat(s.value));
        break;
      case Kind::kHistogram:
        AddHistogram(family, s.help, labels, s.histogram, absl::EndsWith(s.name, kNanosSuffix));
        break;
    }
  }
}

std::string PrometheusText::Render() const {
  std::string out;
  for (const Family& f : families_) {
    absl::StrAppend(&out, "# HELP ", f.name, " ", EscapeHelp(f.help), "\n# TYPE ", f.name, " ",
                    f.type, "\n", f.lines);
  }
  return out;
}

}  // namespace regcache::server::internal
