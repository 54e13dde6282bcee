// Package svgtest reads back, in tests, the SVG charts that the bench
// programs render (bench/cmd/suite, bench/cmd/opschart).
package svgtest

import (
	"encoding/xml"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
)

// Doc is what a test reads back from a rendered chart.
type Doc struct {
	Width, Height float64  // the root's attributes
	Texts         []Text   // every <text> element, in document order
	Polylines     []string // every <polyline>'s points attribute
}

// Text is the content of a <text> element and its position.
type Text struct {
	X, Y float64
	S    string
}

// Parse decodes doc with encoding/xml. It fails the test if doc is not
// well-formed XML, if its root is not an SVG element with a numeric width,
// if a <text> lacks a numeric x or y, or if a <rect> or <line> has a
// non-numeric width or height; and it reports, without stopping, every
// negative or NaN one (percentages are not checked).
func Parse(tb testing.TB, doc string) Doc {
	tb.Helper()
	var out Doc
	d := xml.NewDecoder(strings.NewReader(doc))
	var cur *Text
	depth := 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			tb.Fatalf("SVG is not well-formed XML: %v\n%s", err, doc)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			depth++
			attr := func(name string) string {
				for _, a := range tok.Attr {
					if a.Name.Local == name {
						return a.Value
					}
				}
				return ""
			}
			num := func(name string) float64 {
				v, err := strconv.ParseFloat(attr(name), 64)
				if err != nil {
					tb.Fatalf("<%s %s=%q>: %v", tok.Name.Local, name, attr(name), err)
				}
				return v
			}
			switch tok.Name.Local {
			case "svg":
				if depth != 1 || tok.Name.Space != "http://www.w3.org/2000/svg" {
					tb.Fatalf("root is not an SVG element: %v", tok.Name)
				}
				out.Width, out.Height = num("width"), num("height")
			case "text":
				cur = &Text{X: num("x"), Y: num("y")}
			case "polyline":
				out.Polylines = append(out.Polylines, attr("points"))
			case "rect", "line":
				for _, a := range tok.Attr {
					if (a.Name.Local == "width" || a.Name.Local == "height") && !strings.HasSuffix(a.Value, "%") {
						if v := num(a.Name.Local); v < 0 || math.IsNaN(v) {
							tb.Errorf("<%s> with %s %v", tok.Name.Local, a.Name.Local, v)
						}
					}
				}
			}
		case xml.CharData:
			if cur != nil {
				cur.S += string(tok)
			}
		case xml.EndElement:
			depth--
			if tok.Name.Local == "text" && cur != nil {
				out.Texts = append(out.Texts, *cur)
				cur = nil
			}
		}
	}
	if out.Width == 0 {
		tb.Fatal("no <svg> root with a width")
	}
	return out
}

// Text returns the first <text> whose content is s.
func (d Doc) Text(s string) (Text, bool) {
	for _, x := range d.Texts {
		if x.S == s {
			return x, true
		}
	}
	return Text{}, false
}

// Strings returns the content of every <text>, in document order.
func (d Doc) Strings() []string {
	var out []string
	for _, t := range d.Texts {
		out = append(out, t.S)
	}
	return out
}
