package jobs_test

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"erp/db"
	"erp/jobs"
)

func qtyOf(s string) decimal.Decimal { return decimal.RequireFromString(s) }

// setupPlanning is setup with the planning chain's subscribers and its
// master data: product A1 made of 2 m of M1 and 0.5 kg of M2 per unit,
// product A2 made of 1.25 m of M1, and warehouse MAIN, which supplies
// production unless noWarehouse.
func setupPlanning(t testing.TB, cfg jobs.DispatcherConfig, noWarehouse bool) *testBundle {
	t.Helper()
	b := setupWith(t, cfg, time.Hour, jobs.ProductionPlanning{}, jobs.MaterialIssue{})
	for _, in := range []db.ItemInput{{SKU: "A2", Name: "Стул", Unit: "шт"}, {SKU: "M1", Name: "Брус", Unit: "м"}, {SKU: "M2", Name: "Лак", Unit: "кг"}} {
		_, err := db.CreateItem(b.ctx, b.pool, in)
		require.NoError(t, err)
	}
	_, err := db.CreateWarehouse(b.ctx, b.pool, db.WarehouseInput{Code: "MAIN", Name: "Основной", SuppliesProduction: !noWarehouse})
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := db.SetBillOfMaterials(b.ctx, tx, "A1", []db.ComponentInput{{SKU: "M1", Quantity: qtyOf("2")}, {SKU: "M2", Quantity: qtyOf("0.5")}}); err != nil {
			return err
		}
		_, err := db.SetBillOfMaterials(b.ctx, tx, "A2", []db.ComponentInput{{SKU: "M1", Quantity: qtyOf("1.25")}})
		return err
	}))
	return b
}

// receiveTwoLines receives shop order syncID for 2 A1 and 4 A2 and returns
// its order.received event.
func (b *testBundle) receiveTwoLines(t *testing.T, syncID string) db.Event {
	t.Helper()
	var events []db.Event
	_, err := jobs.Write(b.ctx, b.outbox, func(tx pgx.Tx) (db.SalesOrder, []db.Event, error) {
		so, evs, _, err := db.ReceiveOrder(b.ctx, tx, nil, db.ReceiveOrderInput{
			Source: db.SourceShop, ExternalID: syncID, Customer: "ООО Ромашка",
			Lines: []db.LineInput{{SKU: "A1", Quantity: qtyOf("2")}, {SKU: "A2", Quantity: qtyOf("4")}},
		})
		events = evs
		return so, evs, err
	})
	require.NoError(t, err)
	require.Equal(t, db.EventOrderReceived, events[1].Type)
	return events[1]
}

// waitAllProcessed waits until no event is unprocessed. A stage of the
// chain marks its event processed in the transaction that journals the next
// stage's events, so none means the whole chain is done.
func (b *testBundle) waitAllProcessed(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for b.count(t, `SELECT count(*) FROM events WHERE processed_at IS NULL`) > 0 {
		require.False(t, time.Now().After(deadline), "events still unprocessed after 15s")
		time.Sleep(10 * time.Millisecond)
	}
}

// chainDocs returns the production orders of sales order soID by line and
// the material issue of each.
func (b *testBundle) chainDocs(t *testing.T, soID int64) ([]db.ProductionOrder, []db.WarehouseMove) {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT id FROM plan_prod_orders WHERE sales_order_id = $1 ORDER BY sales_order_line_no`, soID)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	var pos []db.ProductionOrder
	var moves []db.WarehouseMove
	for _, id := range ids {
		po, err := db.ProductionOrderByID(b.ctx, b.pool, id)
		require.NoError(t, err)
		pos = append(pos, po)
		rows, err := b.pool.Query(b.ctx, `SELECT id FROM wh_moves WHERE prod_order_id = $1`, id)
		require.NoError(t, err)
		mvIDs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		require.Len(t, mvIDs, 1, "production order %s has %d material issues", po.Number, len(mvIDs))
		mv, err := db.WarehouseMoveByID(b.ctx, b.pool, mvIDs[0])
		require.NoError(t, err)
		moves = append(moves, mv)
	}
	return pos, moves
}

func TestPlanningChainCreatesEachDocumentOnce(t *testing.T) {
	t.Parallel()
	b := setupPlanning(t, jobs.DispatcherConfig{}, false)
	b.startRiver(t)
	received := b.receiveTwoLines(t, "shop-0a166468d263")
	b.waitAllProcessed(t)

	check := func() {
		t.Helper()
		pos, moves := b.chainDocs(t, received.EntityID)
		require.Len(t, pos, 2)
		want := []struct {
			sku, qty string
			issue    map[string]string // component SKU → quantity
		}{
			{"A1", "2", map[string]string{"M1": "4", "M2": "1"}},
			{"A2", "4", map[string]string{"M1": "5"}},
		}
		for i, w := range want {
			require.Equal(t, w.sku, pos[i].SKU)
			require.True(t, qtyOf(w.qty).Equal(pos[i].Quantity))
			require.EqualValues(t, i+1, *pos[i].SalesOrderLineNo)
			require.Equal(t, "MAIN", *moves[i].FromWarehouse)
			got := map[string]string{}
			for _, l := range moves[i].Lines {
				got[l.SKU] = l.Quantity.String()
			}
			require.Equal(t, w.issue, got, "ВЦ %s for %s", moves[i].Number, pos[i].Number)
		}
		require.Equal(t, 2, b.count(t, `SELECT count(*) FROM plan_prod_orders`))
		require.Equal(t, 2, b.count(t, `SELECT count(*) FROM wh_moves`))
		require.Equal(t, 4, b.count(t, `SELECT count(*) FROM events WHERE type = 'doc.created' AND entity IN ('plan_prod_orders', 'wh_moves') AND actor_id IS NULL`),
			"the chain journals one doc.created per document, by the system")
		require.Zero(t, b.count(t, `SELECT count(*) FROM deliveries WHERE status <> 'delivered'`))
	}
	check()
	so, err := db.SalesOrderByID(b.ctx, b.pool, received.EntityID)
	require.NoError(t, err)
	require.Equal(t, db.SalesOrderAccepted, so.Status, "order_acceptance ran beside production_planning")

	// An operator redelivers every stage: the order to planning, each
	// production order to the material issue. All are delivered again and
	// nothing is made twice.
	planning, issue := "production_planning", "material_issue"
	keys, err := b.dispatcher.Redeliver(b.ctx, nil, db.DeliveryFilter{EventID: &received.ID, Subscriber: &planning})
	require.NoError(t, err)
	require.Len(t, keys, 1)
	rows, err := b.pool.Query(b.ctx, `SELECT id FROM events WHERE type = 'doc.created' AND entity = 'plan_prod_orders'`)
	require.NoError(t, err)
	prodEvents, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, prodEvents, 2)
	for _, id := range prodEvents {
		k, err := b.dispatcher.Redeliver(b.ctx, nil, db.DeliveryFilter{EventID: &id, Subscriber: &issue})
		require.NoError(t, err)
		keys = append(keys, k...)
	}
	require.Len(t, keys, 3)
	deadline := time.Now().Add(15 * time.Second)
	for b.count(t, `SELECT count(*) FROM deliveries WHERE status <> 'delivered'`) > 0 {
		require.False(t, time.Now().After(deadline), "redeliveries not delivered within 15s")
		time.Sleep(10 * time.Millisecond)
	}
	b.waitAllProcessed(t)
	for _, k := range keys {
		d, err := db.DeliveriesOfEvent(b.ctx, b.pool, k.EventID)
		require.NoError(t, err)
		for _, d := range d {
			if d.SubscriberID == k.SubscriberID {
				require.Equal(t, db.DeliveryDelivered, d.Status)
				require.EqualValues(t, 1, d.Attempts, "a fresh round, delivered at its first attempt")
			}
		}
	}
	check()
	require.Equal(t, 3, b.count(t, `SELECT count(*) FROM events WHERE type = $1`, db.EventRedelivered))
}

func TestMaterialIssueWithoutProductionWarehouseIsDeadLetter(t *testing.T) {
	t.Parallel()
	b := setupPlanning(t, jobs.DispatcherConfig{}, true)
	b.startRiver(t)
	received := b.receiveTwoLines(t, "shop-d1024afc281d")
	b.waitAllProcessed(t)

	pos, err := b.pool.Query(b.ctx, `SELECT e.id, p.number FROM events e JOIN plan_prod_orders p ON p.id = e.entity_id
		WHERE e.entity = 'plan_prod_orders' AND e.type = 'doc.created' ORDER BY e.id`)
	require.NoError(t, err)
	type prodEvent struct {
		ID     int64  `db:"id"`
		Number string `db:"number"`
	}
	events, err := pgx.CollectRows(pos, pgx.RowToStructByName[prodEvent])
	require.NoError(t, err)
	require.Len(t, events, 2, "planning does not need the warehouse")
	for _, ev := range events {
		d := b.delivery(t, ev.ID, "material_issue")
		require.Equal(t, db.DeliveryDead, d.Status, "no retry can find a warehouse nobody marked")
		require.EqualValues(t, 1, d.Attempts)
		require.NotNil(t, d.LastError)
		require.Contains(t, *d.LastError, "no warehouse supplies production")
		require.Contains(t, *d.LastError, ev.Number)
	}
	require.Zero(t, b.count(t, `SELECT count(*) FROM wh_moves`))

	// The operator marks the warehouse and redelivers the dead letters.
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		_, err := db.SetProductionWarehouse(b.ctx, tx, "MAIN")
		return err
	}))
	dead, issue := db.DeliveryDead, "material_issue"
	keys, err := b.dispatcher.Redeliver(b.ctx, nil, db.DeliveryFilter{Status: &dead, Subscriber: &issue})
	require.NoError(t, err)
	require.Len(t, keys, 2)
	deadline := time.Now().Add(15 * time.Second)
	for b.count(t, `SELECT count(*) FROM wh_moves`) < 2 || b.count(t, `SELECT count(*) FROM events WHERE processed_at IS NULL`) > 0 {
		require.False(t, time.Now().After(deadline), fmt.Sprintf("%d material issues after 15s", b.count(t, `SELECT count(*) FROM wh_moves`)))
		time.Sleep(10 * time.Millisecond)
	}
	_, moves := b.chainDocs(t, received.EntityID)
	require.Len(t, moves, 2)
	require.Zero(t, b.count(t, `SELECT count(*) FROM deliveries WHERE status <> 'delivered'`))
}

// issues returns the material issues answering the production orders'
// events evs, by event: the move's number and its lines as SKU → quantity.
func (b *testBundle) issues(t *testing.T, evs []db.Event) map[int64][]string {
	t.Helper()
	got := map[int64][]string{}
	for _, ev := range evs {
		rows, err := b.pool.Query(b.ctx, `SELECT m.number || ' ' || i.sku || '=' || l.quantity FROM wh_moves m
			JOIN wh_move_lines l ON l.move_id = m.id JOIN items i ON i.id = l.item_id
			WHERE m.source_event_id = $1 AND m.prod_order_id = $2 ORDER BY l.line_no`, ev.ID, ev.EntityID)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		if len(lines) > 0 {
			got[ev.ID] = lines
		}
	}
	return got
}

// TestMaterialIssueBySets: HandleBatch writes for a set of production
// orders' doc.created what Handle writes for each, its results in the
// order of the events and the moves numbered in that order: none for an
// item without a bill of materials, a cancelled order or another entity's
// event; handled again, the batch issues nothing twice.
func TestMaterialIssueBySets(t *testing.T) {
	t.Parallel()
	b := setupPlanning(t, jobs.DispatcherConfig{}, false)
	first := b.prodOrders(t, "A1", 1, "3")[0]
	noBill := b.prodOrders(t, "M1", 1, "1")[0]
	cancelled := b.prodOrders(t, "A2", 1, "1")[0]
	second := b.prodOrders(t, "A2", 1, "4")[0]
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		_, _, err := db.CancelProductionOrder(b.ctx, tx, nil, cancelled.EntityID, 1, "не нужен")
		return err
	}))
	other := b.receiveTwoLines(t, "shop-5e7a0c2b9d41") // a sales order's event
	// Out of journal order: results and numbers follow the events given.
	evs := []db.Event{second, noBill, other, cancelled, first}

	handle := func() [][]db.Event {
		var written [][]db.Event
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
			written, err = jobs.MaterialIssue{}.HandleBatch(b.ctx, tx, evs)
			return err
		}))
		return written
	}
	written := handle()
	require.Len(t, written, len(evs))
	for i, ev := range evs {
		if ev.ID != first.ID && ev.ID != second.ID {
			require.Empty(t, written[i], "event %d", i)
			continue
		}
		require.Len(t, written[i], 1)
		w := written[i][0]
		require.Equal(t, db.EventDocCreated, w.Type)
		require.Equal(t, db.EntityWarehouseMoves, w.Entity)
		require.Nil(t, w.ActorID)
		require.NotZero(t, w.NewDispatchJobID)
		require.JSONEq(t, fmt.Sprintf(`{"id": %d, "entity": "wh_move"}`, w.EntityID), string(w.Payload))
	}
	got := b.issues(t, evs)
	require.Len(t, got, 2)
	wantSecond, wantFirst := got[second.ID], got[first.ID]
	require.Len(t, wantSecond, 1)
	require.Len(t, wantFirst, 2)
	require.Regexp(t, `^ВЦ-\d{4}-000001 M1=5\.000$`, wantSecond[0])
	require.Regexp(t, `^ВЦ-\d{4}-000002 M1=6\.000$`, wantFirst[0])
	require.Regexp(t, `^ВЦ-\d{4}-000002 M2=1\.500$`, wantFirst[1])
	mv, err := db.WarehouseMoveByID(b.ctx, b.pool, written[0][0].EntityID)
	require.NoError(t, err)
	require.Equal(t, db.MoveIssueToProduction, mv.Kind)
	require.Equal(t, db.MoveDraft, mv.Status)
	require.Equal(t, "MAIN", *mv.FromWarehouse)

	// Again, as a redelivered batch: nothing is issued twice.
	moves, events := b.count(t, `SELECT count(*) FROM wh_moves`), b.count(t, `SELECT count(*) FROM events`)
	require.Equal(t, make([][]db.Event, len(evs)), handle())
	require.Equal(t, 2, moves)
	require.Equal(t, moves, b.count(t, `SELECT count(*) FROM wh_moves`))
	require.Equal(t, events, b.count(t, `SELECT count(*) FROM events`))
}

// TestMaterialIssueBadEventDoesNotFailItsBatchMates: a production order
// whose materials no move can carry, among good ones in one dispatch,
// goes dead alone: the others are issued once each, numbered in the order
// of their events, and a redelivery of the batch issues nothing twice.
func TestMaterialIssueBadEventDoesNotFailItsBatchMates(t *testing.T) {
	t.Parallel()
	b := setupPlanning(t, jobs.DispatcherConfig{BacklogAfter: -1}, false)
	evs := b.prodOrders(t, "A1", 2, "1")
	bad := b.prodOrders(t, "A1", 1, "999999999999999.999")[0]
	evs = append(evs, b.prodOrders(t, "A2", 1, "2")...)

	dispatched, err := b.dispatcher.Dispatch(b.ctx, evs[0].ID)
	require.NoError(t, err)
	require.Equal(t, 4, dispatched)

	d := b.delivery(t, bad.ID, "material_issue")
	require.Equal(t, db.DeliveryDead, d.Status)
	require.EqualValues(t, 1, d.Attempts)
	require.Contains(t, *d.LastError, "too large")
	for _, ev := range evs {
		d := b.delivery(t, ev.ID, "material_issue")
		require.Equal(t, db.DeliveryDelivered, d.Status, "production order %d", ev.EntityID)
		require.EqualValues(t, 1, d.Attempts)
	}
	got := b.issues(t, append(evs, bad))
	require.Len(t, got, 3)
	var numbers []string
	for _, ev := range evs {
		numbers = append(numbers, strings.Fields(got[ev.ID][0])[0])
	}
	require.IsIncreasing(t, numbers)

	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		written, err := jobs.MaterialIssue{}.HandleBatch(b.ctx, tx, evs)
		require.Equal(t, make([][]db.Event, len(evs)), written)
		return err
	}))
	require.Equal(t, 3, b.count(t, `SELECT count(*) FROM wh_moves`))
}

// prodOrders creates n production orders of sku for qty each, in one
// transaction, and returns their doc.created events.
func (b *testBundle) prodOrders(t testing.TB, sku string, n int, qty string) []db.Event {
	t.Helper()
	var events []db.Event
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		for range n {
			_, evs, err := db.CreateProductionOrder(b.ctx, tx, nil, db.ProductionOrderInput{SKU: sku, Quantity: qtyOf(qty)})
			if err != nil {
				return err
			}
			events = append(events, evs...)
		}
		return nil
	}))
	return events
}

// BenchmarkMaterialIssueDispatch: one dispatch of 100 production orders'
// doc.created, each issued its materials (two components) by
// material_issue. It reports per production order the CPU of the test
// process and of its PostgreSQL (cpu-ns/event) besides the wall time
// (ns/event), the database's work included; as information only, on a
// shared machine.
func BenchmarkMaterialIssueDispatch(b *testing.B) {
	const orders = 100
	s := setupPlanning(b, jobs.DispatcherConfig{BacklogAfter: -1}, false)
	var cpu time.Duration
	for range b.N {
		b.StopTimer()
		events := s.prodOrders(b, "A1", orders, "3")
		before := s.cpu(b)
		b.StartTimer()
		dispatched, err := s.dispatcher.Dispatch(s.ctx, events[0].ID)
		b.StopTimer()
		require.NoError(b, err)
		require.Equal(b, orders, dispatched)
		cpu += s.cpu(b) - before
	}
	require.Equal(b, b.N*orders, s.count(b, `SELECT count(*) FROM wh_moves`))
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*orders), "ns/event")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*orders), "cpu-ns/event")
}

// cpu is the CPU time used so far by this process and by the processes
// of its PostgreSQL server (the children of the postmaster serving
// b.pool), read from getrusage and /proc at clock-tick resolution.
func (b *testBundle) cpu(t testing.TB) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	total := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	var backend int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT pg_backend_pid()`).Scan(&backend))
	postmaster, _ := procStat(backend)
	procs, err := os.ReadDir("/proc")
	require.NoError(t, err)
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		if ppid, ticks := procStat(pid); ppid == postmaster || pid == postmaster {
			total += ticks
		}
	}
	return total
}

// procStat is the parent and the CPU time (user + system) of process pid
// from /proc/pid/stat, assuming 100 clock ticks a second; zero when it is
// gone.
func procStat(pid int) (ppid int, cpu time.Duration) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	// The fields after the command, which may hold spaces: state, ppid,
	// … utime (14th of the line), stime.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	ppid, _ = strconv.Atoi(f[1])
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return ppid, time.Duration(utime+stime) * 10 * time.Millisecond
}
