// Confusable skeletons (after Unicode TR39, section 4): two names whose skeletons are
// equal print alike. A name written wholly in Cyrillic look-alike letters ("аррlе")
// passes MixesLookAlikeScripts (strings.h) and still lists like the Latin "apple"; their
// skeletons are both "apple". Pure functions, thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace gpupool {

// `s` (UTF-8) with each character replaced by its Latin look-alike, then case-folded:
//  - Cyrillic and Greek letters that print like Latin ones, both cases (а е о р с у х і ј
//    ѕ ԁ һ ԛ ԝ ү ӏ; ο ν ρ ι κ α γ ϲ ϳ; А В Е К М Н О Р С Т У Х Ѕ Ј ...; Α Β Ε Ζ Η Κ Μ Ν
//    Ο Ρ Τ Υ Χ ...), and the Latin ɡ ı ɩ ǀ;
//  - fullwidth ASCII (U+FF01..U+FF5E) as ASCII;
//  - as TR39 does: the digit 0 as O; the digit 1, the capital I (and Cyrillic І, Greek Ι,
//    Cyrillic Ӏ) and | as l;
//  - then Latin, Greek and Cyrillic capitals in lower case.
// So "аррlе", "APPLE", "ａｐｐｌｅ" and "appIe" all give "apple", and "c0c0" gives "coco".
// Not covered: sequences that print like one letter ("rn" and "m"), accents (no
// normalisation: "é" is not "e"), and scripts other than these. Malformed UTF-8 bytes
// are kept as they are.
std::string ConfusableSkeleton(std::string_view s);

}  // namespace gpupool
