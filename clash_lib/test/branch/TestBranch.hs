{-# LANGUAGE DataKinds, NoImplicitPrelude, RankNTypes, ScopedTypeVariables,
             FlexibleContexts, TypeApplications, TypeOperators, NoStarIsType,
             TypeFamilies, AllowAmbiguousTypes, MonoLocalBinds #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver -fconstraint-solver-iterations=8 #-}
{-|
Self-checking tests of K2C.Fifo, K2C.Branch, K2C.Repeat and K2C.Merge in the Clash
simulation (exit code 1 on any failure): the cabal test-suite @branch@. With
@--vectors DIR@ it also writes the replay vectors of the tops in "Tops"
("Cosim"), which tests/test_blocks.py replays on their Verilog.

* Streams: every case runs 300 random beats under five traffic patterns
  (random idle gaps at the input, random downstream stalls). Each cycle the
  block's input ready and output beat are compared with "Reference" (the
  cycle rules written independently), the output beats must be exactly the
  expected function of the input beats in order (nothing lost, duplicated or
  reordered; a repeat's beats each @n@ times), and for a lone fifo the
  formula "beat k valid from max(q_k + 1, m_(k-1) + 1)" is checked directly
  (@q_k + 2@ for a blockFifo). Nested branches are
  compared with the reference's single 3-input fork/join.
* Merge: every function bit-exact against Integer arithmetic, exhaustively
  for small formats and on random operands (extremes included) for larger
  ones, each result also through 'requantize' into several output formats;
  ties and saturations are counted to show they were exercised. Clash's own
  'add' / 'sub' / 'mul' on SFixed are checked for exactness too.
-}
module Main (main) where

import Clash.Prelude hiding (split)
import qualified Prelude as P
import Clash.Signal.Internal (Signal ((:-)))
import Control.Monad (unless)
import System.Environment (getArgs)
import System.Exit (die, exitFailure)
import System.Random (StdGen, mkStdGen, randomRs, split)

import K2C.Activation (requantize)
import K2C.Branch (branches, fork, joined, moves)
import K2C.Fifo (blockFifo, fifo)
import K2C.Merge
import K2C.Repeat (repeatS)
import K2C.Stream (Stream, mapS, (|>))

import Cosim (writeVectors)
import Reference
import Stages (hold)

main :: IO ()
main = do
  vectors <- vectorsFolder
  streamFailures <- P.concat <$> P.mapM report (P.zipWith ($) streamCases (P.map mkStdGen [1 ..]))
  mergeFailures  <- P.concat <$> P.mapM report (P.zipWith ($) mergeCases (P.map mkStdGen [100 ..]))
  let failures = streamFailures P.++ mergeFailures
  P.putStrLn (show (P.length streamCases P.+ P.length mergeCases) P.++ " cases, "
              P.++ show (P.length failures) P.++ " failures")
  unless (P.null failures) exitFailure
  P.mapM_ writeVectors vectors

-- | The folder of @--vectors DIR@, if given.
vectorsFolder :: IO (Maybe FilePath)
vectorsFolder = do
  args <- getArgs
  case args of
    []               -> P.return Nothing
    ["--vectors", d] -> P.return (Just d)
    _                -> die "usage: branch [--vectors DIR]"

-- | A case's name, failures and notes.
type Outcome = (String, [String], [String])

report :: Outcome -> IO [String]
report (name, failures, notes) = do
  P.putStrLn ((if P.null failures then "PASS " else "FAIL ") P.++ name)
  P.mapM_ (P.putStrLn . ("    " P.++)) (notes P.++ P.take 12 failures)
  P.return failures

------------------------------------------------------------------------------
-- Streams

type U = Unsigned 16

-- | Test functions for the hold stages, on Integers (reference) and U.
inc, triple, flipBits :: Integer -> Integer
inc x      = (x + 1) `P.mod` 65536
triple x   = (3 * x) `P.mod` 65536
flipBits x = 65535 - x

onU :: (Integer -> Integer) -> U -> U
onU f = fromInteger . f . toInteger

class ToV a where toV :: a -> V
instance KnownNat n => ToV (Unsigned n) where toV = L . toInteger
instance (ToV a, ToV b) => ToV (a, b) where toV (a, b) = P (toV a) (toV b)

l :: Integer -> V
l = L

streamCases :: [StdGen -> Outcome]
streamCases =
  [ fifoCase d1, fifoCase d2, fifoCase d3, fifoCase d5, fifoCase d7
  , blockFifoCase d1, blockFifoCase d2, blockFifoCase d3, blockFifoCase d7
  , repeatCase "repeatS 3 |> fifo 2" (repeatS d3 |> fifo d2) (Seq (Repeat 3) (Fifo 2)) 3 P.id
  , repeatCase "repeatS 1 |> fifo 1" (repeatS d1 |> fifo d1) (Seq (Repeat 1) (Fifo 1)) 1 P.id
  , repeatCase "hold 2 |> repeatS 5 |> blockFifo 4" (hold d2 (onU inc) |> repeatS d5 |> blockFifo d4)
      (Seq (Hold 2 inc) (Seq (Repeat 5) (BlockFifo 4))) 5 inc
  , streamCase "branches (hold 3 inc |> fifo 2) (fifo 4)"
      (branches (hold d3 (onU inc) |> fifo d2) (fifo d4))
      (Br (Seq (Hold 3 inc) (Fifo 2)) (Fifo 4))
      (\x -> P (l (inc x)) (l x))
  , streamCase "branches (fifo 1) (hold 5 triple |> hold 1 flip |> fifo 1)"
      (branches (fifo d1) (hold d5 (onU triple) |> hold d1 (onU flipBits) |> fifo d1))
      (Br (Fifo 1) (Seq (Hold 5 triple) (Seq (Hold 1 flipBits) (Fifo 1))))
      (\x -> P (l x) (l (flipBits (triple x))))
  , streamCase "residual: hold 2 |> branches (hold 2 |> hold 3 |> fifo 3) (fifo 20) |> fifo 2"
      (hold d2 (onU inc) |> branches (hold d2 (onU triple) |> hold d3 (onU inc) |> fifo d3) (fifo d20) |> fifo d2)
      (Seq (Hold 2 inc) (Seq (Br (Seq (Hold 2 triple) (Seq (Hold 3 inc) (Fifo 3))) (Fifo 20)) (Fifo 2)))
      (\x -> P (l (inc (triple (inc x)))) (l (inc x)))
  , streamCase "fifo-only branches: branches (fifo 2) (fifo 3)"
      (branches (fifo d2) (fifo d3))
      (Br (Fifo 2) (Fifo 3))
      (\x -> P (l x) (l x))
  , streamCase "nested right = Br3: branches (hold 2 |> fifo 2) (branches (fifo 3) (hold 4 |> hold 1 |> fifo 1))"
      (branches (hold d2 (onU inc) |> fifo d2) (branches (fifo d3) (hold d4 (onU triple) |> hold d1 (onU flipBits) |> fifo d1)))
      (Br3 (Seq (Hold 2 inc) (Fifo 2)) (Fifo 3) (Seq (Hold 4 triple) (Seq (Hold 1 flipBits) (Fifo 1))))
      (\x -> P (l (inc x)) (P (l x) (l (flipBits (triple x)))))
  , streamCase "nested left = Br3: branches (branches (fifo 1) (hold 3 |> fifo 2)) (hold 1 |> fifo 4), reshaped"
      (branches (branches (fifo d1) (hold d3 (onU triple) |> fifo d2)) (hold d1 (onU inc) |> fifo d4)
         |> mapS (\((a, b), c) -> (a, (b, c))))
      (Br3 (Fifo 1) (Seq (Hold 3 triple) (Fifo 2)) (Seq (Hold 1 inc) (Fifo 4)))
      (\x -> P (l x) (P (l (triple x)) (l (inc x))))
  , streamCase "wiring = Br: fork to (hold 3 |> fifo 2) and (fifo 4), joined"
      (wired2 (hold d3 (onU inc) |> fifo d2) (fifo d4))
      (Br (Seq (Hold 3 inc) (Fifo 2)) (Fifo 4))
      (\x -> P (l (inc x)) (l x))
  , streamCase "wiring = Br3: fork to (hold 2 |> fifo 2), (fifo 3), (hold 4 |> hold 1 |> fifo 1), joined a (joined b c)"
      (wired3 (hold d2 (onU inc) |> fifo d2) (fifo d3) (hold d4 (onU triple) |> hold d1 (onU flipBits) |> fifo d1))
      (Br3 (Seq (Hold 2 inc) (Fifo 2)) (Fifo 3) (Seq (Hold 4 triple) (Seq (Hold 1 flipBits) (Fifo 1))))
      (\x -> P (l (inc x)) (P (l x) (l (flipBits (triple x)))))
  , streamCase "branch inside a branch: branches (branches (fifo 1) (hold 2 |> fifo 1) |> fifo 2) (fifo 5)"
      (branches (branches (fifo d1) (hold d2 (onU inc) |> fifo d1) |> fifo d2) (fifo d5))
      (Br (Seq (Br (Fifo 1) (Seq (Hold 2 inc) (Fifo 1))) (Fifo 2)) (Fifo 5))
      (\x -> P (P (l x) (l (inc x))) (l x))
  ]

-- | Two branches wired by name as the emitter wires a network that is not
-- series-parallel: a 'fork' to both heads, the tails (FIFOs) 'joined', every
-- tail moving with the join ('moves').
wired2 :: Stream dom a b -> Stream dom a c -> Stream dom a (b, c)
wired2 first second (input, readyOut) = (output, readyIn)
  where
    (reads, readyIn) = fork input (ready1 :> ready2 :> Nil)
    (out1, ready1) = first (reads !! (0 :: Int), move)
    (out2, ready2) = second (reads !! (1 :: Int), move)
    output = joined out1 out2
    move = moves output readyOut

-- | Three branches wired by name: one 3-way 'fork', @joined a (joined b c)@.
wired3 :: Stream dom a b -> Stream dom a c -> Stream dom a d -> Stream dom a (b, (c, d))
wired3 first second third (input, readyOut) = (output, readyIn)
  where
    (reads, readyIn) = fork input (ready1 :> ready2 :> ready3 :> Nil)
    (out1, ready1) = first (reads !! (0 :: Int), move)
    (out2, ready2) = second (reads !! (1 :: Int), move)
    (out3, ready3) = third (reads !! (2 :: Int), move)
    output = joined out1 (joined out2 out3)
    move = moves output readyOut

-- | Idle percentage at the input, stall percentage downstream.
traffics :: [(String, Int, Int)]
traffics = [("clean", 0, 0), ("gaps", 40, 0), ("stalls", 0, 50), ("gaps+stalls", 30, 40), ("heavy", 70, 70)]

beatsPerRun :: Int
beatsPerRun = 300

-- | Cycle rows: (input offered, input ready, output, downstream ready).
type Row a b = (Maybe a, Bool, Maybe b, Bool)

simulateStream
  :: forall b . NFDataX b
  => (HiddenClockResetEnable System => Stream System U b)
  -> (String, Int, Int) -> StdGen -> ([U], [Row U b])
simulateStream = simulateRepeated 1

-- | The same, for a block that outputs @n@ beats per input beat.
simulateRepeated
  :: forall b . NFDataX b
  => Int -> (HiddenClockResetEnable System => Stream System U b)
  -> (String, Int, Int) -> StdGen -> ([U], [Row U b])
simulateRepeated n block (_, idle, stall) gen = (beats, P.take (P.min limit (finish + 30)) rows)
  where
    (g1, g23) = split gen
    (g2, g3) = split g23
    beats = P.take beatsPerRun (P.map fromIntegral (randomRs (0, 65535 :: Int) g3))
    gaps = case geometric idle g1 of { g : gs -> g + 1 : gs; [] -> [] }
    readyOut = fromList (False : P.map (>= stall) (randomRs (0, 99 :: Int) g2))
    (output, readyIn) = withClockResetEnable clockGen resetGen enableGen block (input, readyOut)
    input = source gaps beats readyIn
    limit = 60 * n * beatsPerRun
    rows = P.take limit (sample (bundle (input, readyIn, output, readyOut)))
    moved (_, _, o, r) = if r && isJust' o then 1 else 0 :: Int
    finish = P.length (P.takeWhile (< n * beatsPerRun) (P.scanl (+) 0 (P.map moved rows)))

geometric :: Int -> StdGen -> [Int]
geometric percent gen = runs (randomRs (0, 99 :: Int) gen)
  where runs rolls = let (idle, rest) = P.span (< percent) rolls
                     in P.length idle : runs (P.drop 1 rest)

-- | Offer the beats in order after their gaps, holding each until it moves.
source :: [Int] -> [a] -> Signal dom Bool -> Signal dom (Maybe a)
source _ [] ready' = Nothing :- source [] [] (tailS ready')
source gaps (beat : beats) ~(r :- rs) = case gaps of
  g : gs | g > 0 -> Nothing :- source (g - 1 : gs) (beat : beats) rs
  _ : gs         -> Just beat :- if r then source gs beats rs else source (0 : gs) (beat : beats) rs
  []             -> source [0] (beat : beats) (r :- rs)

tailS :: Signal dom a -> Signal dom a
tailS ~(_ :- rest) = rest

isJust' :: Maybe a -> Bool
isJust' = P.maybe False (P.const True)

-- | A block against its reference net under every traffic pattern.
streamCase
  :: forall b . (NFDataX b, ToV b)
  => String -> (HiddenClockResetEnable System => Stream System U b) -> Net
  -> (Integer -> V) -> StdGen -> Outcome
streamCase name block net expect = repeatedCase name block net 1 (P.replicate 1 . expect)

-- | A repeat (and what follows it) against its reference: each input beat
-- becomes @n@ output beats, each @f@ of it.
repeatCase
  :: String -> (HiddenClockResetEnable System => Stream System U U) -> Net -> Int
  -> (Integer -> Integer) -> StdGen -> Outcome
repeatCase name block net n f = repeatedCase name block net n (P.replicate n . l . f)

repeatedCase
  :: forall b . (NFDataX b, ToV b)
  => String -> (HiddenClockResetEnable System => Stream System U b) -> Net -> Int
  -> (Integer -> [V]) -> StdGen -> Outcome
repeatedCase name block net n expect gen = (name, P.concat failures, notes)
  where
    runs = P.zipWith (\t g -> (t, simulateRepeated n block t g)) traffics (gens gen)
    (failures, notes) = P.unzip (P.map (checkRun net expect) runs)

gens :: StdGen -> [StdGen]
gens g = let (a, b) = split g in a : gens b

checkRun :: ToV b => Net -> (Integer -> [V]) -> ((String, Int, Int), ([U], [Row U b])) -> ([String], String)
checkRun net expect ((tname, _, _), (beats, rows)) = (P.map ((tname P.++ ": ") P.++) failures, note)
  where
    failures = P.take 3 (replay 0 (start net) rows) P.++ orderFailures
    delivered = [toV v | (_, _, Just v, True) <- rows]
    wanted = P.concatMap (expect . toInteger) beats
    orderFailures
      | delivered P.== wanted = []
      | otherwise = ["output beats differ from the expected sequence ("
                     P.++ show (P.length delivered) P.++ " of " P.++ show (P.length wanted)
                     P.++ " delivered)"]
    note = tname P.++ ": " P.++ show (P.length delivered) P.++ " beats in "
           P.++ show (P.length rows) P.++ " cycles"
    replay :: ToV b => Int -> St -> [Row U b] -> [String]
    replay _ _ [] = []
    replay t st ((i, rIn, o, rOut) : rest) =
      [ "cycle " P.++ show t P.++ ": ready " P.++ show rIn P.++ ", reference " P.++ show (ready st)
      | rIn P./= ready st ] P.++
      [ "cycle " P.++ show t P.++ ": output " P.++ show (toV <$> o) P.++ ", reference " P.++ show (out st)
      | (toV <$> o) P./= out st ] P.++
      replay (t + 1) (step st (l . toInteger <$> i) rOut) rest

-- | A lone fifo: the reference, plus the first-valid formula checked directly.
fifoCase, blockFifoCase :: forall d . (KnownNat d, 1 <= d) => SNat d -> StdGen -> Outcome
fifoCase depth = queueCase "fifo" (fifo depth) (Fifo (snatToNum depth)) 1 (snatToNum depth)
blockFifoCase depth = queueCase "blockFifo" (blockFifo depth) (BlockFifo (snatToNum depth)) 2 (snatToNum depth)

-- | A FIFO whose beat is valid @latency@ cycles after it was accepted, at the
-- earliest.
queueCase
  :: String -> (HiddenClockResetEnable System => Stream System U U) -> Net -> Int -> Int
  -> StdGen -> Outcome
queueCase kind block net latency d gen = (name, refFailures P.++ P.concat formulaFailures P.++ rateFailures, notes)
  where
    name = kind P.++ " " P.++ show d
    (refFailures, notes) = case streamCase name block net l gen of (_, f, n) -> (f, n)
    runs = P.zipWith (\t g -> (t, snd (simulateStream block t g))) traffics (gens gen)
    formulaFailures = [P.map ((tn P.++ ": ") P.++) (P.take 3 (formula latency rows)) | ((tn, _, _), rows) <- runs]
    -- Deeper than the latency, with clean traffic: one beat per cycle; a
    -- depth-1 fifo: one per two.
    rate | d P.> latency = Just 1
         | latency P.== 1 = Just 2
         | otherwise = Nothing
    rateFailures =
      [ "clean: " P.++ show (P.length moves) P.++ " beats moved in cycles "
          P.++ show (P.head moves) P.++ ".." P.++ show (P.last moves)
      | Just every <- [rate]
      , ((tn, _, _), rows) <- P.take 1 runs, tn P.== "clean"
      , let moves = [t | (t, (_, _, Just _, True)) <- P.zip [0 :: Int ..] rows]
      , P.last moves P.- P.head moves P./= every P.* (P.length moves P.- 1) ]

formula :: Int -> [Row U U] -> [String]
formula latency rows =
  [ "beat " P.++ show k P.++ ": first valid in cycle " P.++ show f P.++ ", rule says " P.++ show want
  | (k, q) <- P.zip [0 :: Int ..] accepts
  , k P.< P.length moves
  , let prev = if k P.== 0 then -1 else moves P.!! (k P.- 1)
        f = P.head [t | t <- valids, t P.> prev]
        want = P.max (q P.+ latency) (prev P.+ 1)
  , f P./= want ]
  where
    indexed = P.zip [0 :: Int ..] rows
    accepts = [t | (t, (Just _, True, _, _)) <- indexed]
    moves   = [t | (t, (_, _, Just _, True)) <- indexed]
    valids  = [t | (t, (_, _, Just _, _)) <- indexed]

------------------------------------------------------------------------------
-- Merge arithmetic

mergeCases :: [StdGen -> Outcome]
mergeCases =
  [ binaryCase @8 @8 @4 @10
  , binaryCase @4 @10 @8 @8
  , binaryCase @3 @2 @2 @3
  , binaryCase @1 @4 @5 @0
  , binaryCase @6 @6 @6 @6
  , binaryCase @2 @0 @4 @7
  , averageCase @2 @9 @8
  , averageCase @3 @9 @8
  , averageCase @4 @9 @8
  , averageCase @5 @5 @3
  , averageCase @7 @6 @2
  , averageCase @8 @10 @8
  , averageCase @3 @11 @10
  , averageCase @6 @12 @6
  , identityCase
  ]

raw :: (KnownNat i, KnownNat f) => SFixed i f -> Integer
raw = toInteger . unSF

fromRaw :: forall i f . (KnownNat i, KnownNat f) => Integer -> SFixed i f
fromRaw = sf SNat . fromInteger

-- | The reference rounding: raw @x@ with @f@ fraction bits to @oi.fo@:
-- floor (x * 2^fo / 2^f + 1/2), saturated. Also says whether it was a tie
-- (fo < f and exactly half way) and whether it saturated.
refRound :: Integer -> Int -> Int -> Int -> (Integer, Bool, Bool)
refRound x f oi fo = (P.max lo (P.min hi r), tie, r P.< lo P.|| r P.> hi)
  where
    r = (2 P.* x P.* 2 P.^ fo P.+ 2 P.^ f) `P.div` (2 P.* 2 P.^ f)
    tie = fo P.< f P.&& (2 P.* x P.* 2 P.^ fo) `P.mod` (2 P.* 2 P.^ f) P.== 2 P.^ f
    lo = P.negate (2 P.^ (oi P.+ fo P.- 1))
    hi = 2 P.^ (oi P.+ fo P.- 1) P.- 1

-- | Operands of @SFixed i f@: every value when there are at most 64, else the
-- extremes, zero, +-1 LSB and random values.
operands :: forall i f . (KnownNat i, KnownNat f) => StdGen -> [Integer]
operands gen
  | hi P.- lo P.< 64 = [lo .. hi]
  | otherwise        = [lo, hi, 0, 1, -1, lo P.+ 1, hi P.- 1] P.++ P.take 120 (randomRs (lo, hi) gen)
  where
    w = natToNum @(i + f) :: Int
    lo = P.negate (2 P.^ (w P.- 1))
    hi = 2 P.^ (w P.- 1) P.- 1

-- | Requantize an exact result into every output format and compare.
-- Returns failures and (ties, saturations) seen.
requantizeAll
  :: forall ci cf . (KnownNat ci, KnownNat cf)
  => String -> SFixed ci cf -> ([String], (Int, Int))
requantizeAll what x = (P.concat fs, (P.sum ts, P.sum ss))
  where
    (fs, ts, ss) = P.unzip3
      [ one @8 @8, one @3 @5, one @3 @12, one @12 @2, one @1 @0, one @ci @cf ]
    one :: forall oi fo . (KnownNat oi, KnownNat fo) => ([String], Int, Int)
    one = ( [ what P.++ " -> SFixed " P.++ show oi P.++ " " P.++ show fo P.++ ": raw "
              P.++ show got P.++ ", reference " P.++ show want
            | got P./= want ]
          , fromEnum tie, fromEnum sat )
      where
        oi = natToNum @oi :: Int
        fo = natToNum @fo :: Int
        got = raw (requantize x :: SFixed oi fo)
        (want, tie, sat) = refRound (raw x) (natToNum @cf) oi fo

binaryCase
  :: forall i1 f1 i2 f2
   . (KnownNat i1, KnownNat f1, KnownNat i2, KnownNat f2)
  => StdGen -> Outcome
binaryCase gen = (name, P.take 20 failures, [notes])
  where
    name = "merge SFixed " P.++ show i1 P.++ " " P.++ show f1 P.++ " with SFixed "
           P.++ show i2 P.++ " " P.++ show f2
    i1 = natToNum @i1 :: Int
    i2 = natToNum @i2 :: Int
    f1 = natToNum @f1 :: Int
    f2 = natToNum @f2 :: Int
    fm = P.max f1 f2
    (ga, gb) = split gen
    pairs = [(a, b) | a <- operands @i1 @f1 ga, b <- operands @i2 @f2 gb]
    results = P.map check pairs
    failures = P.concatMap (\(fs, _, _) -> fs) results
    ties = P.sum [t | (_, t, _) <- results]
    sats = P.sum [s | (_, _, s) <- results]
    notes = show (P.length pairs) P.++ " operand pairs, " P.++ show ties
            P.++ " ties and " P.++ show sats P.++ " saturations through requantize"
    check (a, b) = (exact P.++ rq, P.sum (P.map (fst . snd) rqs), P.sum (P.map (snd . snd) rqs))
      where
        x = fromRaw @i1 @f1 a
        y = fromRaw @i2 @f2 b
        ax = a P.* 2 P.^ (fm P.- f1)
        by = b P.* 2 P.^ (fm P.- f2)
        tag op = op P.++ " " P.++ show (a, b)
        exact = P.concat
          [ cmp "addExact" (raw (addExact x y)) (ax P.+ by)
          , cmp "subExact" (raw (subExact x y)) (ax P.- by)
          , cmp "mulExact" (raw (mulExact x y)) (a P.* b)
          , cmp "maxExact" (raw (maxExact x y)) (P.max ax by)
          , cmp "minExact" (raw (minExact x y)) (P.min ax by)
          , cmp "Clash add" (raw (add x y)) (ax P.+ by)
          , cmp "Clash sub" (raw (sub x y)) (ax P.- by)
          , cmp "Clash mul" (raw (mul x y)) (a P.* b) ]
        cmp op got want = [tag op P.++ ": raw " P.++ show got P.++ ", reference " P.++ show want | got P./= want]
        rqs = [ requantizeAll (tag "add") (addExact x y), requantizeAll (tag "sub") (subExact x y)
              , requantizeAll (tag "mul") (mulExact x y), requantizeAll (tag "max") (maxExact x y)
              , requantizeAll (tag "min") (minExact x y) ]
        rq = P.concatMap fst rqs

-- | 'average' of n values from sums of @SFixed si sf@: exhaustive up to 2^14
-- sums, otherwise extremes and random.
averageCase
  :: forall n si sf . (KnownNat n, 2 <= n, KnownNat si, KnownNat sf)
  => StdGen -> Outcome
averageCase gen = (name, P.take 20 failures, [notes])
  where
    n = natToNum @n :: Integer
    sfb = natToNum @sf :: Int
    w = natToNum @(si + sf) :: Int
    name = "average n=" P.++ show n P.++ " of SFixed " P.++ show (natToNum @si :: Int) P.++ " " P.++ show sfb
    lo = P.negate (2 P.^ (w P.- 1))
    hi = 2 P.^ (w P.- 1) P.- 1
    sums | w P.<= 14 = [lo .. hi]
         | otherwise = [lo, hi, 0, 1, -1] P.++ P.take 5000 (randomRs (lo, hi) gen)
    results = P.concat
      [[one @8 @8 s, one @3 @5 s, one @3 @12 s, one @12 @2 s, one @1 @0 s, one @si @sf s] | s <- sums]
    failures = P.concat [f | (f, _, _) <- results]
    ties = P.length [() | (_, True, _) <- results]
    sats = P.length [() | (_, _, True) <- results]
    notes = show (P.length sums) P.++ " sums x 6 output formats, " P.++ show ties
            P.++ " ties, " P.++ show sats P.++ " saturations"
    one :: forall oi fo . (KnownNat oi, KnownNat fo) => Integer -> ([String], Bool, Bool)
    one s = ([ "average " P.++ show s P.++ " -> SFixed " P.++ show oi P.++ " " P.++ show fo
               P.++ ": raw " P.++ show got P.++ ", reference " P.++ show want | got P./= want ], tie, sat)
      where
        oi = natToNum @oi :: Int
        fo = natToNum @fo :: Int
        got = raw (average (SNat @n) (fromRaw @si @sf s) :: SFixed oi fo)
        num = 2 P.* s P.* 2 P.^ fo P.+ n P.* 2 P.^ sfb
        den = 2 P.* n P.* 2 P.^ sfb
        r = num `P.div` den
        olo = P.negate (2 P.^ (oi P.+ fo P.- 1))
        ohi = 2 P.^ (oi P.+ fo P.- 1) P.- 1
        want = P.max olo (P.min ohi r)
        tie = num `P.mod` den P.== 0   -- s / n * 2^fo is exactly half way
        sat = r P.< olo P.|| r P.> ohi

-- | requantize between equal formats is the identity (every value).
identityCase :: StdGen -> Outcome
identityCase _ = ("requantize is the identity between equal formats", P.take 5 failures, [])
  where
    failures = ident @8 @8 P.++ ident @3 @5 P.++ ident @1 @0 P.++ ident @4 @10
    ident :: forall i f . (KnownNat i, KnownNat f) => [String]
    ident = [ "SFixed " P.++ show (natToNum @i :: Int) P.++ " " P.++ show (natToNum @f :: Int)
              P.++ ": " P.++ show x
            | r <- [P.negate (2 P.^ (w P.- 1)) .. 2 P.^ (w P.- 1) P.- 1]
            , let x = fromRaw @i @f r, requantize x P./= x ]
      where w = natToNum @(i + f) :: Int
