#include "braid/report/html_report.hpp"

#include <fmt/format.h>

#include <chrono>
#include <ctime>

#include "braid/report/plots.hpp"
#include "braid/report/svg.hpp"
#include "braid/util/fs.hpp"

namespace braid::report {
namespace {

constexpr const char* kStyle = R"css(
body{font-family:system-ui,sans-serif;margin:24px auto;max-width:1100px;color:#222;padding:0 16px}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#f4f4f4}pre{background:#f7f7f7;padding:8px;overflow:auto;font-size:12px;max-height:600px}
.kpi{display:inline-block;margin:0 24px 8px 0}.kpi b{display:block;font-size:20px}
.add{color:#065f16;background:#e6ffec}.del{color:#8b0000;background:#ffebe9}.hunk{color:#555}
svg{max-width:100%;height:auto}.muted{color:#777}
)css";

std::string fmt_score(double v) { return fmt::format("{:.4g}", v); }

std::string time_text(double unix_seconds) {
  if (unix_seconds <= 0) return "-";
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&t));
  return buf;
}

// A unified diff with added/removed lines marked; every line escaped.
std::string diff_html(const std::string& diff) {
  std::string out = "<pre class=\"diff\">";
  std::size_t start = 0;
  while (start < diff.size()) {
    std::size_t nl = diff.find('\n', start);
    std::string line = diff.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    start = nl == std::string::npos ? diff.size() : nl + 1;
    const char* cls = "";
    if (line.rfind("+++", 0) == 0 || line.rfind("---", 0) == 0) cls = "hunk";
    else if (!line.empty() && line[0] == '+') cls = "add";
    else if (!line.empty() && line[0] == '-') cls = "del";
    else if (line.rfind("@@", 0) == 0) cls = "hunk";
    out += fmt::format("<span class=\"{}\">{}</span>\n", cls, escape_html(line));
  }
  return out + "</pre>";
}

std::string json_table(const json& j) {
  if (!j.is_object() || j.empty()) return "<p class=\"muted\">none</p>";
  std::string s = "<table>";
  for (auto& [k, v] : j.items())
    s += fmt::format("<tr><th>{}</th><td>{}</td></tr>", escape_html(k), escape_html(v.is_string() ? v.get<std::string>() : v.dump()));
  return s + "</table>";
}

// The fast path's summary of a `braid run` (meta "conversion").
std::string conversion_html(const json& c) {
  auto text = [](const json& j, const char* key) { return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string(); };
  const json gate = c.value("gate", json::object());
  const json ann = c.value("annotation", json::object());
  std::string h = "<h2>Conversion</h2><table>";
  auto row = [&](const std::string& k, const std::string& v) { h += fmt::format("<tr><th>{}</th><td>{}</td></tr>", escape_html(k), escape_html(v)); };
  row("input", text(c, "input"));
  row("method", text(c, "method"));
  row("NCCL calls converted", fmt::format("{} of {}", c.value("converted_calls", 0), c.value("nccl_calls", 0)));
  row("rule changes", std::to_string(c.value("changes", json::array()).size()));
  if (c.contains("rewrite"))
    row("LLM rewrite", fmt::format("{} after {} attempt(s) {}", c["rewrite"].value("accepted", false) ? "accepted" : "not accepted",
                                   c["rewrite"].value("attempts", 0), text(c["rewrite"], "failure")));
  row("gate", text(gate, "status") + (text(gate, "reason").empty() ? "" : " (" + text(gate, "reason") + ")") +
                  (text(gate, "failure").empty() ? "" : ": " + text(gate, "failure")));
  row("compiled", text(c, "compiled"));
  row("annotation", fmt::format("{}: {} blocks, {} knobs{}", text(ann, "method"), ann.value("blocks", json::array()).size(),
                                ann.value("knob_count", 0), text(ann, "llm_outcome").empty() ? "" : " (LLM: " + text(ann, "llm_outcome") + ")"));
  h += "</table>";
  const json left = c.value("left", json::array());
  if (!left.empty()) {
    h += "<h3>Left as host NCCL</h3><table><tr><th>line</th><th>construct</th><th>reason</th></tr>";
    for (const auto& l : left)
      h += fmt::format("<tr><td>{}</td><td><code>{}</code></td><td>{}</td></tr>", l.value("line", 0), escape_html(text(l, "construct")),
                       escape_html(text(l, "reason")));
    h += "</table>";
  }
  return h;
}

// stop_when's outcome (overview "goal"): which candidate met the goal, and which did not hold up
// on their re-runs.
std::string goal_html(const json& g) {
  std::string h = "<h2>Goal</h2><table>";
  auto runs_text = [](const json& item) {
    std::string t;
    for (const auto& r : item.value("runs", json::array())) t += fmt::format("{}{:.4g}", t.empty() ? "" : ", ", r.get<double>());
    return t;
  };
  if (const json& r = g.at("reached"); r.is_object()) {
    std::string runs = runs_text(r);
    h += fmt::format("<tr><th>met</th><td>{}: <code>{}</code> (generation {}), {} = {:.4g}{}</td></tr>", escape_html(r.value("goal", std::string())),
                     escape_html(r.value("id", std::string())), r.value("generation", 0LL), escape_html(r.value("metric", std::string())),
                     r.value("value", 0.0), runs.empty() ? "" : escape_html("; runs " + runs));
  } else {
    h += "<tr><th>met</th><td>not (yet)</td></tr>";
  }
  for (const auto& item : g.at("refuted"))
    h += fmt::format("<tr><th>not confirmed</th><td><code>{}</code> (generation {}): runs {}; {}</td></tr>", escape_html(item.value("id", std::string())),
                     item.value("generation", 0LL), escape_html(runs_text(item)), escape_html(item.value("why", std::string())));
  return h + "</table>";
}

// Whether the best's figure is a confirmed median or one measurement.
std::string best_measured_text(const json& best) {
  if (!best.value("confirmed", false)) return "<span class=\"muted\">single measurement</span>";
  return fmt::format("<span class=\"muted\">median of {} re-runs (&plusmn;{:.0f}%), first measured {}</span>", best.value("runs", 0),
                     best.value("spread", 0.0) * 50.0, fmt_score(best.value("first_measurement", 0.0)));
}

}  // namespace

std::string render_html_report(RunReader& run, const ReportOptions& options) {
  json ov = run.overview();
  std::string h = "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">";
  h += fmt::format("<title>braid report: {}</title><style>{}</style></head><body>", escape_html(ov.at("name").get<std::string>()), kStyle);
  h += fmt::format("<h1>braid run <code>{}</code></h1>", escape_html(ov.at("name").get<std::string>()));
  h += fmt::format("<p class=\"muted\">{} &middot; report written {}</p>", escape_html(ov.at("path").get<std::string>()),
                   time_text(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()));
  const json& best = ov.at("best");
  const json& cost = ov.at("cost");
  double usd = cost.at("llm_calls_usd").is_number() ? cost.at("llm_calls_usd").get<double>() : cost.at("candidates_usd").get<double>();
  h += "<div>";
  h += fmt::format("<span class=\"kpi\">candidates<b>{}</b></span>", ov.at("count").get<std::int64_t>());
  h += fmt::format("<span class=\"kpi\">generations<b>{}</b></span>", ov.at("max_generation").get<std::int64_t>() + 1);
  h += fmt::format("<span class=\"kpi\">best score<b>{}</b>{}</span>", best.is_null() ? "-" : fmt_score(best.at("score").get<double>()),
                   best.is_null() ? "" : best_measured_text(best));
  if (const json& noise = ov.at("noise"); noise.is_object())
    h += fmt::format("<span class=\"kpi\">noise (seed re-timed {}x)<b>&plusmn;{:.0f}%</b><span class=\"muted\">median {}</span></span>",
                     noise.value("samples", json::array()).size(), noise.value("spread", 0.0) * 50.0, fmt_score(noise.value("median", 0.0)));
  if (!best.is_null() && best.at("ratio_to_bound").is_number())
    h += fmt::format("<span class=\"kpi\">best ratio to bound<b>{}</b></span>", fmt_score(best.at("ratio_to_bound").get<double>()));
  h += fmt::format("<span class=\"kpi\">wall time<b>{:.0f} s</b></span>", ov.at("elapsed_s").get<double>());
  h += fmt::format("<span class=\"kpi\">LLM cost<b>${:.4f}</b></span>", usd);
  h += "</div>";

  if (ov.contains("conversion") && ov.at("conversion").is_object()) h += conversion_html(ov.at("conversion"));
  if (ov.contains("goal") && ov.at("goal").is_object()) h += goal_html(ov.at("goal"));

  // The run's state, then every measurement behind the best (is it really faster than the seed?).
  const json state = run.state();
  h += fmt::format("<p id=\"state\">state: <b>{}</b> &middot; {} of {} generations &middot; {}</p>", escape_html(state.at("state").get<std::string>()),
                   state.at("generations_done").get<std::int64_t>(),
                   state.at("generations_total").is_null() ? std::string("?") : std::to_string(state.at("generations_total").get<std::int64_t>()),
                   escape_html(state.at("why").get<std::string>()));
  h += "<h2>Every candidate</h2><figure>" + *run_plot_svg(run, "every_candidate") + "</figure>";
  h += "<p class=\"muted\">Hollow: a single measurement. Filled: re-measured, with the range of its re-runs and a tick at their median "
       "(blue: promoted or kept, orange: not promoted). Diamond: <code>braid rebench</code> median. Dashed: the seed's score. "
       "Ring: the reported best at its trusted figure (dashed ring: a single measurement).</p>";
  h += "<h2>Progress</h2>";
  for (const char* plot : {"best_by_eval", "best_by_time"}) h += "<figure>" + *run_plot_svg(run, plot) + "</figure>";
  if (ov.at("has_ratio_to_bound").get<bool>()) h += "<figure>" + *run_plot_svg(run, "ratio_by_eval") + "</figure>";
  h += "<figure>" + *run_plot_svg(run, "failures") + "</figure>";

  h += "<h2>Islands</h2><table><tr><th>island</th><th>candidates</th><th>correct</th><th>in archive</th><th>migrants</th><th>best score</th><th>best</th></tr>";
  const json islands = run.islands();  // held: a range-for over islands() itself would dangle
  for (const auto& isl : islands.at("islands")) {
    h += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
                     isl.at("island").get<int>(), isl.at("count").get<std::int64_t>(), isl.at("correct").get<std::int64_t>(),
                     isl.at("archive").get<std::int64_t>(), isl.at("migrants").get<std::int64_t>(),
                     isl.at("best_score").is_null() ? "-" : fmt_score(isl.at("best_score").get<double>()),
                     isl.at("best_id").is_null() ? "-" : escape_html(isl.at("best_id").get<std::string>()));
  }
  h += "</table>";

  if (!best.is_null()) {
    h += "<h2>Lineage of the best candidate</h2>";
    TreeQuery tq;
    tq.focus = best.at("id").get<std::string>();
    tq.up = 12;
    tq.down = 1;
    tq.max_children = 3;
    tq.max_nodes = 200;
    h += "<figure>" + tree_svg(run.tree(tq)) + "</figure>";
  }

  auto top = run.top_candidates(options.top);
  h += "<h2>Best candidates</h2><table><tr><th>#</th><th>id</th><th>score</th><th>ratio to bound</th><th>generation</th><th>island</th><th>patch</th><th>model</th></tr>";
  for (std::size_t i = 0; i < top.size(); ++i) {
    const auto& c = top[i];
    h += fmt::format("<tr><td>{}</td><td><a href=\"#c-{}\"><code>{}</code></a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                     i + 1, escape_html(c.id), escape_html(c.id), fmt_score(c.score),
                     c.ratio_to_bound ? fmt_score(*c.ratio_to_bound) : "-", c.generation, c.island, escape_html(c.patch_type),
                     escape_html(c.model));
  }
  h += "</table>";

  for (std::size_t i = 0; i < top.size() && static_cast<int>(i) < options.detailed; ++i) {
    auto detail = run.candidate(top[i].id);
    if (!detail) continue;
    const json& rec = detail->at("record");
    h += fmt::format("<h2 id=\"c-{0}\">#{1} <code>{0}</code> score {2}</h2>", escape_html(top[i].id), i + 1, fmt_score(top[i].score));
    h += fmt::format("<p>generation {} &middot; island {} &middot; {} by {} &middot; parent <code>{}</code></p>", top[i].generation,
                     top[i].island, escape_html(top[i].patch_type), escape_html(top[i].model),
                     escape_html(top[i].parent_id.empty() ? "-" : top[i].parent_id));
    h += "<h3>Public metrics</h3>" + json_table(rec.value("public_metrics", json::object()));
    std::string feedback = rec.value("text_feedback", std::string());
    if (!feedback.empty()) h += "<h3>Feedback</h3><pre>" + escape_html(feedback) + "</pre>";
    if (detail->at("diff").is_string())
      h += "<details open><summary>Diff against its parent</summary>" + diff_html(detail->at("diff").get<std::string>()) + "</details>";
    h += "<details><summary>Code</summary><pre>" + escape_html(rec.value("code", std::string())) + "</pre></details>";
  }

  json meta = run.meta();
  if (!meta.at("recommendations").empty()) {
    h += "<h2>Meta recommendations (latest)</h2>";
    const auto& latest = meta.at("recommendations").front();
    h += fmt::format("<p class=\"muted\">meta_{}.txt</p><pre>{}</pre>", latest.at("n").get<long>(), escape_html(latest.at("text").get<std::string>()));
  }
  h += "</body></html>\n";
  return h;
}

std::size_t write_html_report(const std::filesystem::path& results_dir, const std::filesystem::path& out, const ReportOptions& options) {
  RunReader run(results_dir);
  std::string html = render_html_report(run, options);
  write_file_atomic(out, html);
  return html.size();
}

}  // namespace braid::report
