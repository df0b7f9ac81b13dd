package demo

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // the table is in Moscow time, also where the system has no tzdata
)

// TableTitle and TableHeader open the "Поток событий" (event stream) screen
// the system was specified from (testdata/seed-*.txt): the title line, then
// a Markdown table of № (event id), Событие (type), Объект (table #row id),
// Данные (payload), Создано (created), Обработано (processed), Кто (actor).
const (
	TableTitle  = "Поток событий\n"
	TableHeader = "| № | Событие | Объект | Данные | Создано | Обработано | Кто |\n|---|---|---|---|---|---|---|\n"
)

// tableTimeLayout is the screen's time format, to the minute.
const tableTimeLayout = "02.01.2006 15:04"

// systemActor is what the screen shows as the actor of an event the system
// journaled itself.
const systemActor = "—"

// tableZone is the screen's time zone: the plant's, Moscow.
const tableZone = "Europe/Moscow"

// WriteTable prints events, in the order given, as the seed's screen: the
// title, the header and one Markdown row per event, times in Moscow time to
// the minute, the payload in PostgreSQL's jsonb spacing, "—" for the system
// as actor. A "|" inside a cell is escaped so that the row keeps its columns.
func WriteTable(w io.Writer, events []Event) error {
	loc, err := time.LoadLocation(tableZone)
	zoneNote := ""
	if err != nil {
		loc, zoneNote = time.UTC, "(время UTC: нет данных о часовом поясе "+tableZone+")\n"
	}
	var b strings.Builder
	b.WriteString(TableTitle)
	b.WriteString(zoneNote)
	b.WriteString(TableHeader)
	for _, ev := range events {
		b.WriteString(tableRow(ev, loc))
	}
	_, err = io.WriteString(w, b.String())
	return err
}

// tableRow is one event's row, with its newline.
func tableRow(ev Event, loc *time.Location) string {
	processed := ""
	if ev.ProcessedAt != nil {
		processed = ev.ProcessedAt.In(loc).Format(tableTimeLayout)
	}
	actor := systemActor
	if ev.Actor != nil {
		actor = ev.Actor.DisplayName
	}
	cells := []string{ev.ID, ev.Type, ev.Object, seedJSON(ev.Payload),
		ev.CreatedAt.In(loc).Format(tableTimeLayout), processed, actor}
	for i, c := range cells {
		cells[i] = strings.ReplaceAll(c, "|", `\|`)
	}
	return "| " + strings.Join(cells, " | ") + " |\n"
}

// seedJSON re-renders a JSON value with the spacing of PostgreSQL's jsonb
// text, as the seed shows payloads ({"id": 46, "no": "ВЦ-…"}), keeping the
// key order the server sent. Invalid JSON is returned as it came.
func seedJSON(raw json.RawMessage) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var b strings.Builder
	type frame struct {
		object bool
		n      int // tokens written in this container (keys and values)
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return b.String()
		}
		if err != nil {
			return string(raw)
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			b.WriteRune(rune(d))
			continue
		}
		if len(stack) > 0 {
			top := &stack[len(stack)-1]
			switch {
			case top.object && top.n%2 == 1:
				b.WriteString(": ")
			case top.n > 0:
				b.WriteString(", ")
			}
			top.n++
		}
		switch v := tok.(type) {
		case json.Delim:
			b.WriteRune(rune(v))
			stack = append(stack, frame{object: v == '{'})
		case string:
			s, _ := json.Marshal(v)
			b.Write(s)
		case json.Number:
			b.WriteString(v.String())
		case bool:
			b.WriteString(strconv.FormatBool(v))
		case nil:
			b.WriteString("null")
		}
	}
}
