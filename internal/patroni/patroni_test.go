package patroni

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestCluster starts a three-member cluster, kills the leader's
// PostgreSQL, switches over, stops the leader's machine, and requires a
// healthy cluster with a new leader after each, and no process left after
// Close. It needs Patroni and etcd (scripts/ensure-ha.sh): QUEEN_HA=1.
func TestCluster(t *testing.T) {
	if os.Getenv("QUEEN_HA") != "1" {
		t.Skip("set QUEEN_HA=1 (make ha-test) to run Patroni and etcd")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cluster folder kept: %s", c.KeepDir())
		}
		if err := c.Close(); err != nil {
			t.Error(err)
		}
		if s := c.Strays(); len(s) > 0 {
			t.Errorf("strays: %v", s)
		}
	})
	if err := c.CreateDatabase(ctx, "queen"); err != nil {
		t.Fatal(err)
	}
	leaderChange := func(what string, do func(leader *Machine) error) {
		t.Helper()
		st, err := c.WaitHealthy(ctx)
		if err != nil {
			t.Fatal(err)
		}
		old := st.Leader().Name
		start := time.Now()
		if err := do(c.Machine(old)); err != nil {
			t.Fatal(err)
		}
		for {
			st, err = c.WaitHealthy(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Leader().Name != old {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Logf("%s: leader %s -> %s in %v (%s)", what, old, st.Leader().Name, time.Since(start).Round(time.Millisecond), st)
	}
	leaderChange("kill postgres", c.KillPostgres)
	leaderChange("switchover", func(m *Machine) error {
		out, err := c.Switchover(ctx, m.Name)
		t.Logf("patronictl: %s", out)
		return err
	})
	leaderChange("stop machine", c.StopMachine)
}
