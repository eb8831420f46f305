// The mixin's settings. Override them where you import it:
//   (import 'specmon-mixin/mixin.libsonnet') + { _config+:: { specmonSelector: 'job="specmon"' } }
{
  _config+:: {
    // A label matcher ANDed into every selector of specmon's own series (specmon_*), in the
    // alerts, the recording rules and every dashboard query. Empty: the shipped expressions.
    specmonSelector: '',
    // The same for the engines' raw series that the recording rules read (vllm:*,
    // llamacpp:*, sglang:*, trtllm_*, tgi_*), e.g. 'namespace="inference"'.
    engineSelector: '',
    // The same for a specmon tap's series (specmon_tap_*: SpecmonRequestAcceptanceOutliers,
    // the Target detail dashboard's outlier panel), e.g. 'job="specmon-tap"'.
    tapSelector: '',
    // Which Prometheus data sources the dashboards' "Data source" picker offers (a regex on
    // their names, Grafana's datasource variable `regex`). Empty: every Prometheus.
    datasourceRegex: '',
    // Where the alerts' runbook_url point: this base, then '#' and the alert's section. The
    // default is the runbook in the repository (docs/runbook.md); a copy of your own (a wiki,
    // an internal mirror) keeps the same section anchors.
    runbookURLBase: 'https://github.com/specmon/specmon/blob/main/docs/runbook.md',
    // Labels added to every alert (not to recording rules), e.g. { team: 'ml-platform' } for
    // Alertmanager's routing. An alert's own labels (severity) are kept where they clash.
    alertLabels: {},
  },
}
