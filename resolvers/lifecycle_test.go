package resolvers_test

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"erp/app/apptest"
)

const cancelSalesOrder = `mutation($id: ID!, $v: Int!, $r: String!) {
	cancelSalesOrder(id: $id, version: $v, reason: $r) { id number status version }
}`

type docState struct {
	ID, Number, Status string
	Version            int
}

// createSalesOrder makes a manual sales order of one line of A1 (SeedItem
// first) and returns it.
func createSalesOrder(t *testing.T, s *apptest.Server) docState {
	t.Helper()
	res := apptest.GQL[struct {
		CreateSalesOrder docState `json:"createSalesOrder"`
	}](t, s, `mutation { createSalesOrder(input: {customer: "Иванов", lines: [{sku: "A1", quantity: "1"}]}) { id number status version } }`, nil)
	return res.CreateSalesOrder
}

// journal is what a test counts to prove a refused request wrote nothing:
// journal events of a type, dispatch jobs, and the changed documents.
type journal struct{ statusChanged, dispatchJobs, cancelled, versions int }

func readJournal(t *testing.T, s *apptest.Server) journal {
	t.Helper()
	// Dispatch in flight deletes the jobs of events a batch takes on, so
	// the job count is read once every event is processed.
	apptest.WaitAllProcessed(t, s)
	var j journal
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT
		(SELECT count(*) FROM events WHERE type = 'doc.status_changed'),
		(SELECT count(*) FROM river_job WHERE kind = 'dispatch_event'),
		(SELECT count(*) FROM sales_orders WHERE status = 'cancelled'),
		(SELECT coalesce(sum(version), 0) FROM sales_orders)`).Scan(&j.statusChanged, &j.dispatchJobs, &j.cancelled, &j.versions))
	return j
}

type statusEvent struct {
	Type    string
	Entity  string
	Payload map[string]any
	Actor   *struct{ Login string }
}

// statusEvents returns the doc.status_changed events of sales order id,
// newest first.
func statusEvents(t *testing.T, s *apptest.Server, entity, id string) []statusEvent {
	t.Helper()
	res := apptest.GQL[struct {
		Events struct {
			Edges []struct{ Node statusEvent }
		}
	}](t, s, `query($e: String!, $id: ID!) { events(filter: {types: ["doc.status_changed"], entity: $e, entityId: $id}) {
		edges { node { type entity payload actor { login } } } } }`, map[string]any{"e": entity, "id": id})
	out := make([]statusEvent, len(res.Events.Edges))
	for i, e := range res.Events.Edges {
		out[i] = e.Node
	}
	return out
}

func TestCancelSalesOrder(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	sales := s.As(apptest.RoleToken(t, s, "clerk", "SALES"))
	so := createSalesOrder(t, s)
	require.Equal(t, "new", so.Status)
	require.Equal(t, 1, so.Version)

	planner := apptest.RoleToken(t, s, "planner", "PLANNER")

	// Refusals first: each writes nothing.
	before := readJournal(t, s)
	refusals := []struct {
		name     string
		token    string
		vars     map[string]any
		code     string
		status   string
		version  float64
		field    string
		contains string
	}{
		{"unknown id", s.Token, map[string]any{"id": "999999", "v": 1, "r": "x"}, "NOT_FOUND", "", 0, "", "there is no sales order 999999"},
		{"stale version", s.Token, map[string]any{"id": so.ID, "v": 2, "r": "x"}, "CONFLICT", "new", 1, "", "version 1"},
		{"empty reason", s.Token, map[string]any{"id": so.ID, "v": 1, "r": "  "}, "BAD_USER_INPUT", "", 0, "reason", ""},
		{"version 0", s.Token, map[string]any{"id": so.ID, "v": 0, "r": "x"}, "BAD_USER_INPUT", "", 0, "version", ""},
		{"planner may not", planner, map[string]any{"id": so.ID, "v": 1, "r": "x"}, "FORBIDDEN", "", 0, "", ""},
	}
	for _, tt := range refusals {
		_, res := s.Do(t, tt.token, cancelSalesOrder, tt.vars)
		require.NotEmpty(t, res.Errors, tt.name)
		e := res.Errors[0]
		require.Equal(t, tt.code, e.Extensions["code"], "%s: %s", tt.name, e.Message)
		if tt.status != "" {
			require.Equal(t, tt.status, e.Extensions["currentStatus"], tt.name)
			require.InDelta(t, tt.version, e.Extensions["currentVersion"], 0, tt.name)
		}
		require.Contains(t, e.Message, tt.contains, tt.name)
		if tt.field != "" {
			require.Equal(t, tt.field, e.Extensions["field"], tt.name)
		}
	}
	require.Equal(t, before, readJournal(t, s), "a refused cancel writes nothing")

	got := apptest.GQL[struct {
		CancelSalesOrder docState `json:"cancelSalesOrder"`
	}](t, sales, cancelSalesOrder, map[string]any{"id": so.ID, "v": 1, "r": "клиент передумал"}).CancelSalesOrder
	require.Equal(t, docState{ID: so.ID, Number: so.Number, Status: "cancelled", Version: 2}, got)

	evs := statusEvents(t, s, "sales_orders", so.ID)
	require.Len(t, evs, 1)
	id, err := strconv.ParseInt(so.ID, 10, 64)
	require.NoError(t, err)
	require.Equal(t, map[string]any{"id": float64(id), "no": so.Number, "entity": "sales_order",
		"from": "new", "to": "cancelled", "reason": "клиент передумал"}, evs[0].Payload)
	require.NotNil(t, evs[0].Actor)
	require.Equal(t, "clerk", evs[0].Actor.Login, "the clerk who cancelled is the actor")
	apptest.WaitAllProcessed(t, s)

	// A cancelled order is final: cancelling again at the current version
	// is a forbidden transition, and writes nothing.
	before = readJournal(t, s)
	e := apptest.GQLErr(t, s, cancelSalesOrder, map[string]any{"id": so.ID, "v": 2, "r": "again"})
	require.Equal(t, "CONFLICT", e.Extensions["code"], e.Message)
	require.Equal(t, "cancelled", e.Extensions["currentStatus"])
	require.InDelta(t, 2, e.Extensions["currentVersion"], 0)
	require.Contains(t, e.Message, "cannot become cancelled")
	require.Equal(t, before, readJournal(t, s))

	read := apptest.GQL[struct{ SalesOrder docState }](t, s, `query($id: ID!) { salesOrder(id: $id) { id number status version } }`,
		map[string]any{"id": so.ID}).SalesOrder
	require.Equal(t, got, read)
}

func TestCancelSalesOrderConcurrentSameVersion(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	so := createSalesOrder(t, s)
	const clerks = 8
	errs := make([]apptest.Response, clerks)
	var wg sync.WaitGroup
	for i := range clerks {
		wg.Go(func() {
			_, errs[i] = s.Do(t, s.Token, cancelSalesOrder, map[string]any{"id": so.ID, "v": 1, "r": "clerk " + strconv.Itoa(i)})
		})
	}
	wg.Wait()
	ok, conflicts := 0, 0
	for _, res := range errs {
		if len(res.Errors) == 0 {
			ok++
			continue
		}
		require.Equal(t, "CONFLICT", res.Errors[0].Extensions["code"], res.Errors[0].Message)
		require.Equal(t, "cancelled", res.Errors[0].Extensions["currentStatus"])
		require.InDelta(t, 2, res.Errors[0].Extensions["currentVersion"], 0)
		conflicts++
	}
	require.Equal(t, 1, ok, "exactly one clerk cancels")
	require.Equal(t, clerks-1, conflicts)
	require.Len(t, statusEvents(t, s, "sales_orders", so.ID), 1, "exactly one doc.status_changed")
	j := readJournal(t, s)
	require.Equal(t, 1, j.statusChanged)
	require.Equal(t, 2, j.versions, "one order at version 2")
}

// A transition whose transaction fails at commit, after the status, the
// event and the dispatch job were written, leaves none of them: a
// deferred constraint trigger the test adds refuses the commit.
func TestTransitionFailingAtCommitLeavesNothing(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	so := createSalesOrder(t, s)
	apptest.WaitAllProcessed(t, s)
	_, err := s.Pool.Exec(t.Context(), `
		CREATE FUNCTION refuse_status_change() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'test: commit refused'; END $$;
		CREATE CONSTRAINT TRIGGER refuse_status_change AFTER INSERT ON events
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
			WHEN (NEW.type = 'doc.status_changed') EXECUTE FUNCTION refuse_status_change();`)
	require.NoError(t, err)
	before := readJournal(t, s)
	e := apptest.GQLErr(t, s, cancelSalesOrder, map[string]any{"id": so.ID, "v": 1, "r": "x"})
	require.Equal(t, "INTERNAL", e.Extensions["code"], e.Message)
	require.Equal(t, before, readJournal(t, s), "no status change, no event, no job")
	read := apptest.GQL[struct{ SalesOrder docState }](t, s, `query($id: ID!) { salesOrder(id: $id) { id number status version } }`,
		map[string]any{"id": so.ID}).SalesOrder
	require.Equal(t, so, read)
}

// A transition PostgreSQL fails to break a deadlock is run again: once,
// and the client sees only its success; every time, and the client gets
// CONFLICT saying to try again, with nothing written, never INTERNAL. A
// trigger the test adds plays the deadlock, at the status change's event.
func TestTransitionFailedByDeadlockIsRetried(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	first, second := createSalesOrder(t, s), createSalesOrder(t, s)
	apptest.WaitAllProcessed(t, s)
	_, err := s.Pool.Exec(t.Context(), `
		CREATE SEQUENCE test_deadlocks;
		CREATE FUNCTION play_deadlock() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			-- A sequence, since the failed transaction rolls back all else.
			IF nextval('test_deadlocks') <= 1 THEN RAISE SQLSTATE '40P01'; END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER play_deadlock BEFORE INSERT ON events
			FOR EACH ROW WHEN (NEW.type = 'doc.status_changed') EXECUTE FUNCTION play_deadlock();`)
	require.NoError(t, err)
	got := mutate(t, s, "cancelSalesOrder", cancelSalesOrder, map[string]any{"id": first.ID, "v": 1, "r": "x"})
	require.Equal(t, docState{ID: first.ID, Number: first.Number, Status: "cancelled", Version: 2}, got)
	require.Len(t, statusEvents(t, s, "sales_orders", first.ID), 1)

	_, err = s.Pool.Exec(t.Context(), `CREATE OR REPLACE FUNCTION play_deadlock() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE SQLSTATE '40P01'; END $$;`)
	require.NoError(t, err)
	before := readJournal(t, s)
	e := refused(t, s, cancelSalesOrder, map[string]any{"id": second.ID, "v": 1, "r": "x"}, "CONFLICT")
	require.Contains(t, e.Message, "try again")
	require.Equal(t, before, readJournal(t, s), "nothing written")
}

// order_acceptance moves a received order new → accepted as the system,
// once: redelivering its order.received changes nothing more.
func TestOrderAcceptanceTransitionsOnceWhenRedelivered(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	res := apptest.GQL[struct {
		ReceiveOrder struct{ Order docState } `json:"receiveOrder"`
	}](t, s, `mutation { receiveOrder(input: {source: CRM, externalId: "51015", customer: "X", lines: [{sku: "A1", quantity: "1"}]}) {
		order { id number status version } } }`, nil)
	so := res.ReceiveOrder.Order
	apptest.WaitAllProcessed(t, s)
	check := func() {
		t.Helper()
		evs := statusEvents(t, s, "sales_orders", so.ID)
		require.Len(t, evs, 1, "one doc.status_changed")
		require.Equal(t, "new", evs[0].Payload["from"])
		require.Equal(t, "accepted", evs[0].Payload["to"])
		require.NotContains(t, evs[0].Payload, "reason")
		require.Nil(t, evs[0].Actor, "the system accepts")
		got := apptest.GQL[struct{ SalesOrder docState }](t, s, `query($id: ID!) { salesOrder(id: $id) { id number status version } }`,
			map[string]any{"id": so.ID}).SalesOrder
		require.Equal(t, docState{ID: so.ID, Number: so.Number, Status: "accepted", Version: 2}, got)
	}
	check()
	var received string
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT id::text FROM events WHERE type = 'order.received'`).Scan(&received))
	deliveredAt := func() (at time.Time) {
		t.Helper()
		require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT coalesce(d.delivered_at, 'epoch') FROM deliveries d
			JOIN subscribers s ON s.id = d.subscriber_id WHERE s.name = 'order_acceptance' AND d.event_id = $1`, received).Scan(&at))
		return at
	}
	for range 2 {
		last := deliveredAt()
		apptest.GQL[map[string]any](t, s, `mutation($e: ID!) { redeliver(eventId: $e, subscriber: "order_acceptance") { status } }`,
			map[string]any{"e": received})
		apptest.WaitFor(t, 20*time.Second, "the redelivery delivered", func() bool { return deliveredAt().After(last) })
		apptest.WaitAllProcessed(t, s)
		check()
	}
}

const (
	releaseProductionOrder = `mutation($id: ID!, $v: Int!) { releaseProductionOrder(id: $id, version: $v) { id number status version } }`
	cancelProductionOrder  = `mutation($id: ID!, $v: Int!, $r: String!) { cancelProductionOrder(id: $id, version: $v, reason: $r) { id number status version } }`
	closePurchaseOrder     = `mutation($id: ID!, $v: Int!) { closePurchaseOrder(id: $id, version: $v) { id number status version } }`
	cancelPurchaseOrder    = `mutation($id: ID!, $v: Int!, $r: String!) { cancelPurchaseOrder(id: $id, version: $v, reason: $r) { id number status version } }`
	salesOrderByID         = `query($id: ID!) { salesOrder(id: $id) { id number status version } }`
)

// mutate runs a transition as s's token and returns the document.
func mutate(t *testing.T, s *apptest.Server, field, query string, vars map[string]any) docState {
	t.Helper()
	res := apptest.GQL[map[string]docState](t, s, query, vars)
	return res[field]
}

// refused runs query, which must fail with code, and returns its error.
func refused(t *testing.T, s *apptest.Server, query string, vars map[string]any, code string) apptest.Error {
	t.Helper()
	_, res := s.Do(t, s.Token, query, vars)
	require.NotEmpty(t, res.Errors, "should have failed: %s", query)
	require.Equal(t, code, res.Errors[0].Extensions["code"], res.Errors[0].Message)
	return res.Errors[0]
}

func TestProductionOrderReleaseMovesItsSalesOrder(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	planner := s.As(apptest.RoleToken(t, s, "planner", "PLANNER"))
	sales := s.As(apptest.RoleToken(t, s, "clerk", "SALES"))
	so := createSalesOrder(t, s)
	newPO := func() docState {
		return apptest.GQL[struct {
			CreateProductionOrder docState `json:"createProductionOrder"`
		}](t, planner, `mutation($so: ID!) { createProductionOrder(input: {sku: "A1", quantity: "1", salesOrderId: $so}) { id number status version } }`,
			map[string]any{"so": so.ID}).CreateProductionOrder
	}
	po, second := newPO(), newPO()
	require.Equal(t, "planned", po.Status)

	// A clerk may not release; nothing is written.
	before := readJournal(t, s)
	e := refused(t, sales, releaseProductionOrder, map[string]any{"id": po.ID, "v": 1}, "FORBIDDEN")
	require.NotEmpty(t, e.Message)
	require.Equal(t, before, readJournal(t, s))

	got := mutate(t, planner, "releaseProductionOrder", releaseProductionOrder, map[string]any{"id": po.ID, "v": 1})
	require.Equal(t, docState{ID: po.ID, Number: po.Number, Status: "released", Version: 2}, got)
	soNow := apptest.GQL[struct{ SalesOrder docState }](t, s, salesOrderByID, map[string]any{"id": so.ID}).SalesOrder
	require.Equal(t, "in_production", soNow.Status, "the first release puts the sales order in production")
	require.Equal(t, 2, soNow.Version)
	soEvents := statusEvents(t, s, "sales_orders", so.ID)
	require.Len(t, soEvents, 1)
	require.Equal(t, "new", soEvents[0].Payload["from"])
	require.Equal(t, "in_production", soEvents[0].Payload["to"])
	require.Equal(t, "planner", soEvents[0].Actor.Login, "the release moved it: the releasing planner is the actor")
	poEvents := statusEvents(t, s, "plan_prod_orders", po.ID)
	require.Len(t, poEvents, 1)
	require.Equal(t, "prod_order", poEvents[0].Payload["entity"])

	// The second release leaves the sales order where it is.
	mutate(t, planner, "releaseProductionOrder", releaseProductionOrder, map[string]any{"id": second.ID, "v": 1})
	require.Len(t, statusEvents(t, s, "sales_orders", so.ID), 1)

	// Releasing again is a forbidden transition.
	before = readJournal(t, s)
	e = refused(t, s, releaseProductionOrder, map[string]any{"id": po.ID, "v": 2}, "CONFLICT")
	require.Equal(t, "released", e.Extensions["currentStatus"])
	require.Equal(t, before, readJournal(t, s))

	// A sales order with released production orders cannot be cancelled:
	// the error names them.
	e = refused(t, sales, cancelSalesOrder, map[string]any{"id": so.ID, "v": 2, "r": "x"}, "CONFLICT")
	require.Contains(t, e.Message, po.Number)
	require.Contains(t, e.Message, second.Number)
	require.Equal(t, "in_production", e.Extensions["currentStatus"])
	require.InDelta(t, 2, e.Extensions["currentVersion"], 0)
	require.Equal(t, before, readJournal(t, s))

	// Cancelling both production orders lets the sales order go.
	c := mutate(t, planner, "cancelProductionOrder", cancelProductionOrder, map[string]any{"id": po.ID, "v": 2, "r": "нет материала"})
	require.Equal(t, "cancelled", c.Status)
	require.Equal(t, 3, c.Version)
	e = refused(t, sales, cancelSalesOrder, map[string]any{"id": so.ID, "v": 2, "r": "x"}, "CONFLICT")
	require.Contains(t, e.Message, second.Number)
	require.NotContains(t, e.Message, po.Number)
	mutate(t, planner, "cancelProductionOrder", cancelProductionOrder, map[string]any{"id": second.ID, "v": 2, "r": "нет материала"})
	// A production order still planned goes with its sales order.
	third := newPO()
	cancelled := mutate(t, sales, "cancelSalesOrder", cancelSalesOrder, map[string]any{"id": so.ID, "v": 2, "r": "клиент отказался"})
	require.Equal(t, "cancelled", cancelled.Status)
	thirdEvents := statusEvents(t, s, "plan_prod_orders", third.ID)
	require.Len(t, thirdEvents, 1)
	require.Equal(t, "cancelled", thirdEvents[0].Payload["to"])
	require.Equal(t, "sales order "+so.Number+" cancelled: клиент отказался", thirdEvents[0].Payload["reason"])
	require.Equal(t, "clerk", thirdEvents[0].Actor.Login, "the clerk who cancelled the sales order")

	// It cannot be released, and the cancelled sales order takes no new
	// production order.
	before = readJournal(t, s)
	e = refused(t, planner, releaseProductionOrder, map[string]any{"id": third.ID, "v": 1}, "CONFLICT")
	require.Equal(t, "cancelled", e.Extensions["currentStatus"])
	e = refused(t, planner, `mutation($so: ID!) { createProductionOrder(input: {sku: "A1", quantity: "1", salesOrderId: $so}) { id } }`,
		map[string]any{"so": so.ID}, "BAD_USER_INPUT")
	require.Equal(t, "input.salesOrderId", e.Extensions["field"])
	require.Contains(t, e.Message, so.Number)
	require.Equal(t, before, readJournal(t, s))
	apptest.WaitAllProcessed(t, s)
}

func TestPurchaseOrderCloseAndCancel(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	warehouse := s.As(apptest.RoleToken(t, s, "keeper", "WAREHOUSE"))
	planner := s.As(apptest.RoleToken(t, s, "planner", "PLANNER"))
	newPO := func() docState {
		return apptest.GQL[struct {
			CreatePurchaseOrder docState `json:"createPurchaseOrder"`
		}](t, warehouse, `mutation { createPurchaseOrder(input: {supplier: "ООО Лес", lines: [{sku: "A1", quantity: "5"}]}) { id number status version } }`,
			nil).CreatePurchaseOrder
	}
	a, b := newPO(), newPO()
	require.Equal(t, docState{ID: a.ID, Number: a.Number, Status: "open", Version: 1}, a)
	refused(t, planner, closePurchaseOrder, map[string]any{"id": a.ID, "v": 1}, "FORBIDDEN")
	refused(t, warehouse, cancelPurchaseOrder, map[string]any{"id": a.ID, "v": 1, "r": ""}, "BAD_USER_INPUT")
	refused(t, warehouse, closePurchaseOrder, map[string]any{"id": "424242", "v": 1}, "NOT_FOUND")

	closed := mutate(t, warehouse, "closePurchaseOrder", closePurchaseOrder, map[string]any{"id": a.ID, "v": 1})
	require.Equal(t, "closed", closed.Status)
	require.Equal(t, 2, closed.Version)
	e := refused(t, warehouse, cancelPurchaseOrder, map[string]any{"id": a.ID, "v": 2, "r": "x"}, "CONFLICT")
	require.Equal(t, "closed", e.Extensions["currentStatus"])
	require.Contains(t, e.Message, "final")

	c := mutate(t, warehouse, "cancelPurchaseOrder", cancelPurchaseOrder, map[string]any{"id": b.ID, "v": 1, "r": "поставщик не отвечает"})
	require.Equal(t, "cancelled", c.Status)
	evs := statusEvents(t, s, "wh_purchase_orders", b.ID)
	require.Len(t, evs, 1)
	require.Equal(t, "purchase_order", evs[0].Payload["entity"])
	require.Equal(t, "поставщик не отвечает", evs[0].Payload["reason"])
	require.Equal(t, "keeper", evs[0].Actor.Login)
	require.Len(t, statusEvents(t, s, "wh_purchase_orders", a.ID), 1)
}

// A clerk's cancel of a sales order and a planner's release of its
// production order, sent at once, wait for each other on the two orders'
// locks: whichever comes first wins, the other finds a version it did not
// see and gets CONFLICT. Neither may meet a deadlock (INTERNAL), and the
// orders end as one of the two wins left them: both cancelled, or the
// production order released with its sales order in production.
func TestCancelSalesOrderRacesReleaseProductionOrder(t *testing.T) {
	t.Parallel()
	s := apptest.New(t)
	apptest.SeedItem(t, s)
	clerk := apptest.RoleToken(t, s, "clerk", "SALES")
	planner := s.As(apptest.RoleToken(t, s, "planner", "PLANNER"))
	const rounds = 200
	type pair struct{ so, po docState }
	pairs := make([]pair, rounds)
	for i := range pairs {
		so := createSalesOrder(t, s)
		po := apptest.GQL[struct {
			CreateProductionOrder docState `json:"createProductionOrder"`
		}](t, planner, `mutation($so: ID!) { createProductionOrder(input: {sku: "A1", quantity: "1", salesOrderId: $so}) { id number status version } }`,
			map[string]any{"so": so.ID}).CreateProductionOrder
		pairs[i] = pair{so, po}
	}

	// outcome is "ok" or the error's code.
	outcome := func(res apptest.Response) string {
		if len(res.Errors) == 0 {
			return "ok"
		}
		code, _ := res.Errors[0].Extensions["code"].(string)
		return code
	}
	for i, p := range pairs {
		var cancel, release apptest.Response
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			<-start
			_, cancel = s.Do(t, clerk, cancelSalesOrder, map[string]any{"id": p.so.ID, "v": 1, "r": "клиент передумал"})
		})
		wg.Go(func() {
			<-start
			_, release = s.Do(t, planner.Token, releaseProductionOrder, map[string]any{"id": p.po.ID, "v": 1})
		})
		close(start)
		wg.Wait()
		got := [2]string{outcome(cancel), outcome(release)}
		want := [][2]string{{"ok", "CONFLICT"}, {"CONFLICT", "ok"}}
		require.Contains(t, want, got, "round %d: cancel %v, release %v: one wins, the other sees a version it did not", i, cancel.Errors, release.Errors)

		var soStatus, poStatus string
		require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT so.status, p.status FROM sales_orders so, plan_prod_orders p
			WHERE so.id = $1 AND p.id = $2`, p.so.ID, p.po.ID).Scan(&soStatus, &poStatus))
		if got[0] == "ok" {
			require.Equal(t, [2]string{"cancelled", "cancelled"}, [2]string{soStatus, poStatus}, "round %d: the cancel won", i)
		} else {
			require.Equal(t, [2]string{"in_production", "released"}, [2]string{soStatus, poStatus}, "round %d: the release won", i)
		}
	}
}
