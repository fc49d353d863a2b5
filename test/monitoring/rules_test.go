package monitoring

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/ipkeeper/ipkeeper/internal/testenv"
)

// prometheusRule is what the tests read of a PrometheusRule.
type prometheusRule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Spec       struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert  string `json:"alert"`
				Record string `json:"record"`
				Expr   string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// ruleFile reads deploy/monitoring/prometheusrule.yaml and returns it and
// its spec as a Prometheus rule file.
func ruleFile(t *testing.T) (prometheusRule, []byte) {
	t.Helper()
	raw := readMonitoring(t, "prometheusrule.yaml")
	var pr prometheusRule
	if err := yaml.Unmarshal(raw, &pr); err != nil {
		t.Fatalf("prometheusrule.yaml: %v", err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		t.Fatalf("prometheusrule.yaml is a %s %s, want a monitoring.coreos.com/v1 PrometheusRule", pr.APIVersion, pr.Kind)
	}
	var whole map[string]any
	if err := yaml.Unmarshal(raw, &whole); err != nil {
		t.Fatal(err)
	}
	spec, _ := whole["spec"].(map[string]any)
	out, err := yaml.Marshal(map[string]any{"groups": spec["groups"]})
	if err != nil {
		t.Fatal(err)
	}
	return pr, out
}

// TestAlertRules runs `promtool check rules` on the PrometheusRule's
// rules and `promtool test rules` on testdata/alerts-test.yaml, whose
// synthetic series make each alert fire, and not fire, where it should.
func TestAlertRules(t *testing.T) {
	testenv.NeedCommands(t, "promtool")
	_, rules := ruleFile(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o600); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join("testdata", "alerts-test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts-test.yaml"), tests, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "alerts-test.yaml"}} {
		cmd := exec.Command("promtool", args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// TestAlertRulesCovered: every alert of the PrometheusRule has a case in
// alerts-test.yaml, every ipkeeper_ metric the rules and the test series
// name is one the controller exports, and every rule uses one.
func TestAlertRulesCovered(t *testing.T) {
	pr, _ := ruleFile(t)
	exported := exportedNames(t)
	var cases struct {
		Tests []struct {
			InputSeries []struct {
				Series string `json:"series"`
			} `json:"input_series"`
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	raw, err := os.ReadFile(filepath.Join("testdata", "alerts-test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range cases.Tests {
		for _, s := range tc.InputSeries {
			if unknown, _ := unknownMetrics(s.Series, exported); len(unknown) > 0 {
				t.Errorf("alerts-test.yaml: input series %s: the controller exports no %v", s.Series, unknown)
			}
		}
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	var alerts []string
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			name := r.Alert + r.Record
			alerts = append(alerts, name)
			unknown, used := unknownMetrics(r.Expr, exported)
			if len(unknown) > 0 {
				t.Errorf("rule %s: the controller exports no %v", name, unknown)
			}
			if used == 0 {
				t.Errorf("rule %s uses no ipkeeper metric: %s", name, r.Expr)
			}
			if r.Alert != "" && (!fires[r.Alert] || !quiet[r.Alert]) {
				t.Errorf("alert %s: alerts-test.yaml must have a case where it fires (%v) and one where it does not (%v)", r.Alert, fires[r.Alert], quiet[r.Alert])
			}
		}
	}
	for _, want := range []string{"IPKeeperPoolAlmostFull", "IPKeeperPoolExhaustionForecast", "IPKeeperLeakCandidatesPilingUp",
		"IPKeeperNoControllerLeading", "IPKeeperNodeNetworkNotReady"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("the PrometheusRule has no alert %s (has %v)", want, alerts)
		}
	}
}
