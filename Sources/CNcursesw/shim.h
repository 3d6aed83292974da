#ifndef CNCURSESW_SHIM_H
#define CNCURSESW_SHIM_H
// ncursesw's wide-character API (wget_wch, cchar_t) is declared only with these.
#ifndef _XOPEN_SOURCE_EXTENDED
#define _XOPEN_SOURCE_EXTENDED 1
#endif
#ifndef NCURSES_WIDECHAR
#define NCURSES_WIDECHAR 1
#endif
#include <locale.h>
#include <wchar.h>
#include <ncursesw/curses.h>
#include <ncursesw/term.h>

// Macros Swift cannot import, as functions.
static inline int chat_color_pair(int pair) { return (int)COLOR_PAIR(pair); }
static inline int chat_lines(void) { return LINES; }
static inline int chat_cols(void) { return COLS; }
static inline WINDOW *chat_stdscr(void) { return stdscr; }

/// One key or character: returns OK (a character in *out), KEY_CODE_YES (a key code in *out)
/// or ERR (nothing waiting, in nodelay mode).
static inline int chat_get_wch(unsigned int *out) {
  wint_t value = 0;
  int result = wget_wch(stdscr, &value);
  *out = (unsigned int)value;
  return result;
}

// Attributes (macros built from NCURSES_BITS) and drawing on stdscr.
static inline int chat_attr_normal(void) { return (int)A_NORMAL; }
static inline int chat_attr_bold(void) { return (int)A_BOLD; }
static inline int chat_attr_dim(void) { return (int)A_DIM; }
static inline int chat_attr_reverse(void) { return (int)A_REVERSE; }
static inline int chat_attr_underline(void) { return (int)A_UNDERLINE; }
static inline void chat_attrset(int attributes) { wattrset(stdscr, attributes); }
static inline void chat_move(int y, int x) { wmove(stdscr, y, x); }
static inline void chat_addstr(const char *text) { waddnstr(stdscr, text, -1); }
static inline void chat_clrtoeol(void) { wclrtoeol(stdscr); }
static inline void chat_erase(void) { werase(stdscr); }
static inline void chat_refresh(void) { wrefresh(stdscr); }
static inline void chat_keypad(void) { keypad(stdscr, TRUE); nodelay(stdscr, TRUE); }

/// A terminfo string capability, or NULL when the terminal has none.
static inline const char *chat_capability(const char *name) {
  char *value = tigetstr((char *)name);
  return (value == NULL || value == (char *)-1) ? NULL : value;
}

static inline int chat_wcwidth(unsigned int scalar) { return wcwidth((wchar_t)scalar); }
#endif
