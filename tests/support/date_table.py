"""The time expressions memsvc.dates must understand, and the traps it must leave alone.

One table for the unit tests (tests/unit/test_dates.py) and the benchmarks
(bench/dates.py, bench/date_libraries.py): each row is a sentence and the
spans expected in it, ``(text as written, first date, last date)``, resolved
against :data:`REF`. A row without spans holds no date that may be placed.
Only the standard library: bench/date_libraries.py runs it in any Python.
"""

from __future__ import annotations

import datetime as dt

D = dt.date
CEST = dt.timezone(dt.timedelta(hours=2))
#: Monday 8 May 2023, 14:30 in UTC+2: the reference of every row.
REF = dt.datetime(2023, 5, 8, 14, 30, tzinfo=CEST)


def day(y: int, m: int, d: int) -> tuple[dt.date, dt.date]:
    return D(y, m, d), D(y, m, d)


TABLE = [
    # days
    ("I went hiking yesterday.", [("yesterday", *day(2023, 5, 7))]),
    ("Today I start my new job.", [("Today", *day(2023, 5, 8))]),
    ("We fly to Lisbon tomorrow morning.", [("tomorrow", *day(2023, 5, 9))]),
    ("I cooked risotto tonight.", [("tonight", *day(2023, 5, 8))]),
    ("Last night I couldn't sleep.", [("Last night", *day(2023, 5, 7))]),
    ("This morning the dog ran off.", [("This morning", *day(2023, 5, 8))]),
    ("I saw her the day before yesterday.", [("the day before yesterday", *day(2023, 5, 6))]),
    ("The parcel arrives the day after tomorrow.", [("the day after tomorrow", *day(2023, 5, 10))]),
    ("3 days ago I lost my keys.", [("3 days ago", *day(2023, 5, 5))]),
    ("I finished the book two days ago.", [("two days ago", *day(2023, 5, 6))]),
    ("We met a couple of days ago at the market.", [("a couple of days ago", *day(2023, 5, 6))]),
    ("A day ago it was sunny.", [("A day ago", *day(2023, 5, 7))]),
    ("I started the course 10 days ago.", [("10 days ago", *day(2023, 4, 28))]),
    (
        "She called me five days from now? No, 2 days from now.",
        [("five days from now", *day(2023, 5, 13)), ("2 days from now", *day(2023, 5, 10))],
    ),
    # weekdays
    ("I went to a support group last Friday.", [("last Friday", *day(2023, 5, 5))]),
    ("Last Monday was a holiday.", [("Last Monday", *day(2023, 5, 1))]),
    ("Last Sunday we had brunch.", [("Last Sunday", *day(2023, 5, 7))]),
    ("I'll see the dentist on Friday.", [("Friday", *day(2023, 5, 12))]),
    ("This Friday we go to the cinema.", [("This Friday", *day(2023, 5, 12))]),
    ("Next Tuesday is my exam.", [("Next Tuesday", *day(2023, 5, 16))]),
    ("Next Monday I start.", [("Next Monday", *day(2023, 5, 15))]),
    ("On Wednesday I have a meeting.", [("Wednesday", *day(2023, 5, 10))]),
    ("Saturday's game is at home.", [("Saturday", *day(2023, 5, 13))]),
    ("I play tennis on Fridays.", []),
    ("She does her long run on Saturday mornings.", []),
    ("Her club meets on Thursday evenings at 18:30.", []),
    ("User works Tuesday to Saturday on split shifts.", []),
    ("The book club meets on the first Wednesday of each month.", []),
    ("Friday night works for me.", [("Friday", *day(2023, 5, 12))]),
    ("I go running every Monday.", []),
    ("It was Friday, 5 May 2023 when we met.", [("Friday, 5 May 2023", *day(2023, 5, 5))]),
    # weeks
    ("Last week I painted the fence.", [("Last week", D(2023, 5, 1), D(2023, 5, 7))]),
    ("This week is busy.", [("This week", D(2023, 5, 8), D(2023, 5, 14))]),
    ("Next week we move house.", [("Next week", D(2023, 5, 15), D(2023, 5, 21))]),
    ("The week before last I was ill.", [("The week before last", D(2023, 4, 24), D(2023, 4, 30))]),
    ("The week after next is free.", [("The week after next", D(2023, 5, 22), D(2023, 5, 28))]),
    ("I adopted a cat two weeks ago.", [("two weeks ago", D(2023, 4, 24), D(2023, 4, 30))]),
    ("A week ago I was in Rome.", [("A week ago", D(2023, 5, 1), D(2023, 5, 7))]),
    ("In the past week I slept badly.", [("the past week", D(2023, 5, 1), D(2023, 5, 8))]),
    ("Over the last 3 days it rained.", [("the last 3 days", D(2023, 5, 5), D(2023, 5, 8))]),
    ("Earlier this week my car broke down.", [("this week", D(2023, 5, 8), D(2023, 5, 14))]),
    # weekends
    ("Last weekend we went camping.", [("Last weekend", D(2023, 5, 6), D(2023, 5, 7))]),
    ("This weekend I'm visiting my parents.", [("This weekend", D(2023, 5, 13), D(2023, 5, 14))]),
    ("Next weekend there's a wedding.", [("Next weekend", D(2023, 5, 20), D(2023, 5, 21))]),
    ("This past weekend was relaxing.", [("This past weekend", D(2023, 5, 6), D(2023, 5, 7))]),
    (
        "The weekend before last we painted.",
        [("The weekend before last", D(2023, 4, 29), D(2023, 4, 30))],
    ),
    # months
    ("Last month I changed jobs.", [("Last month", D(2023, 4, 1), D(2023, 4, 30))]),
    ("Next month we travel to Peru.", [("Next month", D(2023, 6, 1), D(2023, 6, 30))]),
    ("This month has been hard.", [("This month", D(2023, 5, 1), D(2023, 5, 31))]),
    (
        "The month before last I started yoga.",
        [("The month before last", D(2023, 3, 1), D(2023, 3, 31))],
    ),
    ("Three months ago I moved.", [("Three months ago", D(2023, 2, 1), D(2023, 2, 28))]),
    ("A month ago I broke my arm.", [("A month ago", D(2023, 4, 1), D(2023, 4, 30))]),
    ("We married in May 2023.", [("May 2023", D(2023, 5, 1), D(2023, 5, 31))]),
    ("May 2023 was rainy.", [("May 2023", D(2023, 5, 1), D(2023, 5, 31))]),
    ("I graduated in June 2019.", [("June 2019", D(2019, 6, 1), D(2019, 6, 30))]),
    ("In March we planted tomatoes.", [("March", D(2023, 3, 1), D(2023, 3, 31))]),
    ("We went skiing in February.", [("February", D(2023, 2, 1), D(2023, 2, 28))]),
    ("In early May I ran a marathon.", [("early May", D(2023, 5, 1), D(2023, 5, 31))]),
    ("Last March I quit smoking.", [("Last March", D(2023, 3, 1), D(2023, 3, 31))]),
    ("Next January I turn forty.", [("Next January", D(2024, 1, 1), D(2024, 1, 31))]),
    ("The conference is in Sept 2024.", [("Sept 2024", D(2024, 9, 1), D(2024, 9, 30))]),
    ("in december i go home", [("december", D(2023, 12, 1), D(2023, 12, 31))]),
    # days of month
    ("The party is on 3 March.", [("3 March", *day(2023, 3, 3))]),
    ("I was born on the 3rd of March.", [("the 3rd of March", *day(2023, 3, 3))]),
    ("The deadline is 3rd of March.", [("3rd of March", *day(2023, 3, 3))]),
    ("My birthday is March 3.", [("March 3", *day(2023, 3, 3))]),
    ("We got engaged on the 5th of October.", [("the 5th of October", *day(2023, 10, 5))]),
    ("It opened on October 5th, 2021.", [("October 5th, 2021", *day(2021, 10, 5))]),
    ("She arrived 14 July 2022.", [("14 July 2022", *day(2022, 7, 14))]),
    ("His card expires on 9 October next year.", [("9 October next year", *day(2024, 10, 9))]),
    ("We met on March 3 last year.", [("March 3 last year", *day(2022, 3, 3))]),
    ("See you on Jan 5.", [("Jan 5", *day(2023, 1, 5))]),
    ("The first of May is a holiday.", [("The first of May", *day(2023, 5, 1))]),
    ("It was the twenty-first of June.", [("the twenty-first of June", *day(2023, 6, 21))]),
    ("The meeting moved to 2023-05-07.", [("2023-05-07", *day(2023, 5, 7))]),
    ("Logged at 2023-05-07T10:00:00Z.", [("2023-05-07", *day(2023, 5, 7))]),
    ("Due 2024/01/15.", [("2024/01/15", *day(2024, 1, 15))]),
    ("On 30 February we partied.", []),
    ("On February 29 2024 we leapt.", [("February 29 2024", *day(2024, 2, 29))]),
    ("On February 29 2023 nothing happened.", []),
    # seasons
    ("Last summer we swam every day.", [("Last summer", D(2022, 6, 1), D(2022, 8, 31))]),
    ("This winter will be cold.", [("This winter", D(2023, 12, 1), D(2024, 2, 29))]),
    ("This summer I'll learn to sail.", [("This summer", D(2023, 6, 1), D(2023, 8, 31))]),
    ("Last winter the pipes froze.", [("Last winter", D(2022, 12, 1), D(2023, 2, 28))]),
    ("Last spring I planted roses.", [("Last spring", D(2022, 3, 1), D(2022, 5, 31))]),
    ("Next autumn we harvest.", [("Next autumn", D(2023, 9, 1), D(2023, 11, 30))]),
    ("Last fall I started college.", [("Last fall", D(2022, 9, 1), D(2022, 11, 30))]),
    (
        "In the summer of 2019 I lived in Oslo.",
        [("the summer of 2019", D(2019, 6, 1), D(2019, 8, 31))],
    ),
    ("In summer 2021 we met.", [("summer 2021", D(2021, 6, 1), D(2021, 8, 31))]),
    # years
    ("A year ago I lived in Berlin.", [("A year ago", D(2022, 1, 1), D(2022, 12, 31))]),
    ("Last year I ran a marathon.", [("Last year", D(2022, 1, 1), D(2022, 12, 31))]),
    ("Next year we retire.", [("Next year", D(2024, 1, 1), D(2024, 12, 31))]),
    ("This year has flown.", [("This year", D(2023, 1, 1), D(2023, 12, 31))]),
    (
        "The year before last I was in Chile.",
        [("The year before last", D(2021, 1, 1), D(2021, 12, 31))],
    ),
    ("Two years ago I got a dog.", [("Two years ago", D(2021, 1, 1), D(2021, 12, 31))]),
    ("We moved here in 2021.", [("2021", D(2021, 1, 1), D(2021, 12, 31))]),
    ("During 1999 I was a student.", [("1999", D(1999, 1, 1), D(1999, 12, 31))]),
    # several in one text
    (
        "Yesterday I booked the flight for next Friday.",
        [("Yesterday", *day(2023, 5, 7)), ("next Friday", *day(2023, 5, 19))],
    ),
    (
        "I bought it in May 2022 and sold it last week.",
        [("May 2022", D(2022, 5, 1), D(2022, 5, 31)), ("last week", D(2023, 5, 1), D(2023, 5, 7))],
    ),
    # lower case, chat style
    ("went to the gym yesterday lol", [("yesterday", *day(2023, 5, 7))]),
    ("what did i cook last weekend", [("last weekend", D(2023, 5, 6), D(2023, 5, 7))]),
    ("next month we're off", [("next month", D(2023, 6, 1), D(2023, 6, 30))]),
    # traps: not dates
    ("May I ask you something?", []),
    ("I may go to the party.", []),
    ("You may 2 times try.", []),
    ("We march to the square.", []),
    ("They will March on the capital.", []),
    ("The soldiers march in March.", [("March", D(2023, 3, 1), D(2023, 3, 31))]),
    ("Wait a second.", []),
    ("She came second in the race.", []),
    ("That took a second or two.", []),
    ("I'll be there in a second.", []),
    ("Meet me at 3pm.", []),
    ("The train leaves at 10:30.", []),
    ("At noon we eat.", []),
    ("I have 2021 stamps.", []),
    ("Room 2023 is on the left.", []),
    ("The score was 3 to 5.", []),
    ("He is 30 years old.", []),
    ("The 5th chapter is the best.", []),
    ("I read it 07/05/2023.", []),
    ("Meet me on 5/7.", []),
    ("A while ago I met him.", []),
    ("Recently I started running.", []),
    ("The other day I saw a fox.", []),
    ("Years ago I lived there.", []),
    ("A few days ago I called.", []),
    ("Several weeks ago it broke.", []),
    ("I'll do it soon.", []),
    ("Someday I'll visit Japan.", []),
    ("At last we arrived.", []),
    ("The last time I saw him he was happy.", []),
    ("Next to the door stands a lamp.", []),
    ("This is the best week of my life.", []),
    ("I swim every week.", []),
    ("A week is a long time in politics.", []),
    ("It lasted two weeks.", []),
    ("I lost 5 pounds in two weeks.", []),
    ("Summer is my favourite season.", []),
    ("In the winter I ski.", []),
    ("Winter 2022 was mild.", []),
    ("June is my sister.", []),
    ("Augusta is a city.", []),
    ("My version is 1.2.2023 build.", []),
    ("Call 555-2023-05.", []),
    ("ISBN 2023-13-45 is not a date.", []),
    ("The 2020s were strange.", []),
    ("I did it 9999 years ago.", []),
    ("Mayday! Mayday!", []),
    ("The marching band played.", []),
    ("Monday works for me.", [("Monday", *day(2023, 5, 8))]),
    ("", []),
]
