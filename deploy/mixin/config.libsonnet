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
    // Which Prometheus data sources the dashboards' "Data source" picker offers (a regex on
    // their names, Grafana's datasource variable `regex`). Empty: every Prometheus.
    datasourceRegex: '',
  },
}
