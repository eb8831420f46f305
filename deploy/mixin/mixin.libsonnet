// specmon's monitoring mixin: the shipped alerts, recording rules and Grafana dashboards
// (deploy/prometheus/*.rules.yml, grafana/dashboards/*.json), with the selectors of _config
// (config.libsonnet). The expressions come from generated/, which deploy/generate.py writes
// from those same files, so that with the default _config every rule and dashboard here is
// the shipped one (tests/deploy/test_kustomize.py checks it with jsonnet).
//
//   jsonnet -J vendor -e '(import "specmon-mixin/mixin.libsonnet").prometheusAlerts'
//   mixtool generate all mixin.libsonnet
local sources = import 'generated/sources.libsonnet';

// Marks (deploy/generate.py, mark()) stand between two section signs, e.g. '§specmon:append§':
// split on them, the odd pieces are marks, replaced by the selector in the form they name.
local MARK = '§';
local replacement(mark, selectors) =
  local parts = std.split(mark, ':');
  local selector = selectors[parts[0]];
  if selector == '' then ''
  else if parts[1] == 'append' then ',' + selector
  else if parts[1] == 'braces' then '{' + selector + '}'
  else selector;

local fill(text, selectors) =
  local pieces = std.split(text, MARK);
  if std.length(pieces) == 1 then text
  else std.join('', [
    if i % 2 == 0 then pieces[i] else replacement(pieces[i], selectors)
    for i in std.range(0, std.length(pieces) - 1)
  ]);

// Marks stand only in PromQL: rules' and targets' `expr`, query variables' `query` and
// `definition` (deploy/generate.py, dashboard_queries()); other strings are left as they are.
local QUERY_KEYS = ['expr', 'query', 'definition'];

local walk(value, selectors) =
  if std.isArray(value) then [walk(item, selectors) for item in value]
  else if std.isObject(value) then {
    [key]:
      if std.isString(value[key]) && std.member(QUERY_KEYS, key) then fill(value[key], selectors)
      else walk(value[key], selectors)
    for key in std.objectFields(value)
  }
  else value;

// The runbook base the shipped rules carry (deploy/prometheus/specmon-alerts.rules.yml), which
// _config.runbookURLBase replaces; the tests check that every runbook_url starts with it.
local SHIPPED_RUNBOOK = 'https://github.com/specmon/specmon/blob/main/docs/runbook.md';

local rebase(url, base) =
  if std.startsWith(url, SHIPPED_RUNBOOK) then base + std.substr(url, std.length(SHIPPED_RUNBOOK), std.length(url))
  else url;

// An alert with _config's extra labels (its own win) and its runbook_url on _config's base.
local alerting(rule, config) =
  if !std.objectHas(rule, 'alert') then rule
  else rule {
    labels: config.alertLabels + (if std.objectHas(rule, 'labels') then rule.labels else {}),
    annotations+: (
      if std.objectHas(rule.annotations, 'runbook_url')
      then { runbook_url: rebase(rule.annotations.runbook_url, config.runbookURLBase) }
      else {}
    ),
  };

(import 'config.libsonnet') + {
  local config = self._config,
  local selectors = {
    specmon: config.specmonSelector,
    engine: config.engineSelector,
    tap: config.tapSelector,
  },
  local dashboard(d) =
    if config.datasourceRegex == '' then d
    else d {
      templating+: {
        list: [
          if variable.type == 'datasource' then variable { regex: config.datasourceRegex } else variable
          for variable in super.list
        ],
      },
    },

  prometheusAlerts+:: {
    local walked = walk(sources.alerts, selectors),
    groups: [
      group { rules: [alerting(rule, config) for rule in group.rules] }
      for group in walked.groups
    ],
  },
  prometheusRules+:: walk(sources.rules, selectors),
  grafanaDashboards+:: {
    [name]: dashboard(walk(sources.dashboards[name], selectors))
    for name in std.objectFields(sources.dashboards)
  },
}
