package jinja

import (
	"strconv"
	"time"
)

// Strftime formats t as Python's datetime.strftime does in the C locale, for the
// directives chat templates use (%Y %y %m %d %e %H %I %M %S %p %B %b %A %a %j %%);
// others are written as given.
func Strftime(t time.Time, format string) string {
	b := make([]byte, 0, len(format)+16)
	pad := func(n, w int) {
		s := strconv.Itoa(n)
		for i := len(s); i < w; i++ {
			b = append(b, '0')
		}
		b = append(b, s...)
	}
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 == len(format) {
			b = append(b, c)
			continue
		}
		i++
		switch format[i] {
		case 'Y':
			pad(t.Year(), 4)
		case 'y':
			pad(t.Year()%100, 2)
		case 'm':
			pad(int(t.Month()), 2)
		case 'd':
			pad(t.Day(), 2)
		case 'e':
			if t.Day() < 10 {
				b = append(b, ' ')
			}
			pad(t.Day(), 1)
		case 'H':
			pad(t.Hour(), 2)
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			pad(h, 2)
		case 'M':
			pad(t.Minute(), 2)
		case 'S':
			pad(t.Second(), 2)
		case 'p':
			if t.Hour() < 12 {
				b = append(b, "AM"...)
			} else {
				b = append(b, "PM"...)
			}
		case 'B':
			b = append(b, t.Month().String()...)
		case 'b':
			b = append(b, t.Month().String()[:3]...)
		case 'A':
			b = append(b, t.Weekday().String()...)
		case 'a':
			b = append(b, t.Weekday().String()[:3]...)
		case 'j':
			pad(t.YearDay(), 3)
		case '%':
			b = append(b, '%')
		default:
			b = append(b, '%', format[i])
		}
	}
	return string(b)
}
