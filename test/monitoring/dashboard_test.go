package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/ipkeeper/ipkeeper/internal/testenv"
)

// dashboardPanel is what the test reads of a Grafana panel (rows hold
// panels of their own).
type dashboardPanel struct {
	ID      int    `json:"id"`
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"`
}

type dashboard struct {
	Title      string           `json:"title"`
	UID        string           `json:"uid"`
	Panels     []dashboardPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// dashboardExprs reads deploy/monitoring/ipkeeper-dashboard.json and
// returns its PromQL expressions by where they are.
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(readMonitoring(t, "ipkeeper-dashboard.json"), &d); err != nil {
		t.Fatalf("ipkeeper-dashboard.json: %v", err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("ipkeeper-dashboard.json: title %q, uid %q, %d panels: want a dashboard", d.Title, d.UID, len(d.Panels))
	}
	exprs := map[string]string{}
	var walk func(ps []dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %d %q has no query", p.ID, p.Title)
			}
			for _, tg := range p.Targets {
				where := fmt.Sprintf("panel %d %q target %s", p.ID, p.Title, tg.RefID)
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("%s: no expr", where)
				}
				exprs[where] = tg.Expr
			}
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(string); ok && v.Type == "query" {
			exprs["variable "+v.Name] = q
		}
	}
	return exprs
}

// TestDashboardMetricsExported: every query of the dashboard names at
// least one ipkeeper metric, and only metrics the controller exports.
func TestDashboardMetricsExported(t *testing.T) {
	exported := exportedNames(t)
	for where, expr := range dashboardExprs(t) {
		unknown, used := unknownMetrics(expr, exported)
		if len(unknown) > 0 {
			t.Errorf("%s: the controller exports no %v: %s", where, unknown, expr)
		}
		if used == 0 {
			t.Errorf("%s uses no ipkeeper metric: %s", where, expr)
		}
	}
}

// TestDashboardQueriesParse has promtool parse every panel query (as a
// recording rule), Grafana's variables replaced by values.
func TestDashboardQueriesParse(t *testing.T) {
	testenv.NeedCommands(t, "promtool")
	vars := strings.NewReplacer("$__rate_interval", "5m", "$pool", ".*")
	var rules []map[string]string
	for where, expr := range dashboardExprs(t) {
		if strings.HasPrefix(where, "variable ") {
			continue // label_values(...) is Grafana's, not PromQL
		}
		e := vars.Replace(expr)
		if strings.Contains(e, "$") {
			t.Errorf("%s: a variable the test does not know: %s", where, expr)
			continue
		}
		rules = append(rules, map[string]string{"record": fmt.Sprintf("dashboard:query%d", len(rules)), "expr": e})
	}
	out, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(file, out, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("promtool", "check", "rules", file).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules on the dashboard's queries: %v\n%s", err, out)
	}
}
