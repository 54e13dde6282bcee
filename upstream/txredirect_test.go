package upstream

import "testing"

// TestTransactionAt finds a transaction's commands in a batch by their
// marks: from its MULTI (TransactionStart) to the last command marked
// InTransaction before the next MULTI or an unmarked command, with two
// transactions back to back and commands of other clients around them.
func TestTransactionAt(t *testing.T) {
	const s = 42
	tx, start := s|InTransaction, s|InTransaction|TransactionStart
	b := NewBatch()
	for _, slot := range []int{SlotAny, start, tx, tx, start, tx, 7, start, tx} {
		b.AddSlot([]byte("*1\r\n$4\r\nPING\r\n"), slot)
	}
	for _, c := range []struct {
		i, start, end int
		ok            bool
	}{
		{0, 0, 0, false}, {1, 1, 3, true}, {2, 1, 3, true}, {3, 1, 3, true},
		{4, 4, 5, true}, {5, 4, 5, true}, {6, 0, 0, false}, {7, 7, 8, true}, {8, 7, 8, true},
	} {
		if !inTransaction(b, c.i) && c.ok {
			t.Fatalf("command %d not marked", c.i)
		}
		if !inTransaction(b, c.i) {
			continue
		}
		start, end, ok := transactionAt(b, c.i)
		if start != c.start || end != c.end || ok != c.ok {
			t.Errorf("transactionAt(%d) = %d, %d, %v; want %d, %d, %v", c.i, start, end, ok, c.start, c.end, c.ok)
		}
	}
	// Marked commands without their MULTI in the batch: none found.
	b2 := NewBatch()
	b2.AddSlot([]byte("x"), tx)
	b2.AddSlot([]byte("x"), tx)
	if _, _, ok := transactionAt(b2, 1); ok {
		t.Error("a transaction found without its MULTI")
	}
}

// TestBatchRewrite replaces the replies a function picks, keeping the
// others and their order: none, the first, the last, and all.
func TestBatchRewrite(t *testing.T) {
	for _, c := range []struct {
		replace []int
		want    string
	}{
		{nil, "+a\r\n:1\r\n$1\r\nc\r\n"},
		{[]int{0}, "-X0\r\n:1\r\n$1\r\nc\r\n"},
		{[]int{2}, "+a\r\n:1\r\n-X2\r\n"},
		{[]int{0, 1, 2}, "-X0\r\n-X1\r\n-X2\r\n"},
	} {
		b := NewBatch()
		for _, r := range []string{"+a\r\n", ":1\r\n", "$1\r\nc\r\n"} {
			b.Add([]byte("*1\r\n$4\r\nPING\r\n"))
			b.appendReply([]byte(r))
		}
		b.Rewrite(func(i int, r []byte) []byte {
			for _, k := range c.replace {
				if k == i {
					return []byte("-X" + string(rune('0'+i)) + "\r\n")
				}
			}
			return nil
		})
		var got string
		for i := range b.Len() {
			got += string(b.Reply(i))
		}
		if got != c.want || b.Len() != len(b.replyEnds) {
			t.Errorf("replacing %v: %q, want %q", c.replace, got, c.want)
		}
	}
}
