{-# LANGUAGE DataKinds, NoImplicitPrelude, RankNTypes, ScopedTypeVariables,
             FlexibleContexts, TypeApplications, TypeOperators, NoStarIsType,
             TypeFamilies #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver -fconstraint-solver-iterations=8 #-}
{-|
Randomised tests of K2C.Window, K2C.Pad, K2C.Pool and K2C.Collect against the
plain-list models of "Reference": every value of every image, 20+ images back
to back per run, each run under every traffic pattern of "Harness" (idle input
gaps, downstream stalls). Timing claims of the module headers are checked
exactly where they apply (downstream always ready). Exit code 1 on any failure.

The cabal test-suite @stream@ (from the repository root, offline as in
docs/architecture/verification.md):

> cabal test stream
> cabal test stream --test-option=--vectors --test-option=DIR

With @--vectors DIR@ it also writes the cycle-exact replay vectors of the
tops in "Tops" ("Cosim"), which tests/test_blocks.py replays on their Verilog.

(@-fconstraint-solver-iterations=8@: the 'KnownNat' of @PoolDepth ph pw@, a
sum of three terms, takes GHC's solver more than its default
4 rounds in the pooling cases' polymorphic timing check.)
-}
module Main (main) where

import Clash.Prelude hiding (window, split)
import qualified Prelude as P
import System.Environment (getArgs)
import System.Exit (die, exitFailure)
import System.Random (StdGen, mkStdGen, randomRs, split)
import Control.Monad (unless)

import K2C.Collect (collect)
import K2C.Pad (pad)
import K2C.Pool (PoolDepth, avgPool, maxPool)
import K2C.Stream (Stream, (|>))
import K2C.Window (window)

import Cosim (writeVectors)
import Harness
import Reference

-- | One test case: a name and, per traffic pattern, failures and a note.
type Outcome = (String, [String], [String])

main :: IO ()
main = do
  vectors <- vectorsFolder
  let outcomes = P.zipWith ($) cases (P.map mkStdGen [1 ..])
  failures <- P.concat <$> P.mapM report outcomes
  P.putStrLn (show (P.length outcomes) P.++ " cases, "
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
    _                -> die "usage: stream [--vectors DIR]"

report :: Outcome -> IO [String]
report (name, failures, notes) = do
  P.putStrLn ((if P.null failures then "PASS " else "FAIL ") P.++ name)
  P.mapM_ (P.putStrLn . ("    " P.++)) (notes P.++ failures)
  P.return failures

cases :: [StdGen -> Outcome]
cases =
  [ windowCase d5 d7 d3 d3 d1 d1 d1
  , windowCase d6 d5 d2 d2 d2 d2 d2
  , windowCase d7 d9 d4 d3 d3 d2 d3
  , windowCase d4 d4 d1 d1 d1 d1 d2
  , windowCase d5 d6 d1 d3 d2 d1 d1
  , windowCase d8 d5 d3 d1 d1 d3 d2
  , windowCase d3 d3 d3 d3 d1 d1 d1
  , windowCase d6 d1 d2 d1 d1 d1 d2
  , windowCase d1 d6 d1 d4 d1 d2 d3
  , windowCase d9 d10 d4 d4 d3 d3 d1
  , windowCase d5 d5 d2 d3 d3 d1 d3
  , windowCase d2 d8 d2 d2 d1 d3 d1
  , padCase d4 d5 d1 d2 d3 d0 d2
  , padCase d3 d3 d0 d0 d0 d0 d1
  , padCase d1 d1 d2 d2 d2 d2 d3
  , padWindowCase d5 d5 d1 d1 d1 d1 d3 d3 d1 d1 d1
  , padWindowCase d4 d6 d0 d1 d0 d1 d2 d2 d2 d2 d2
  , padWindowCase d3 d4 d2 d1 d0 d0 d3 d3 d1 d1 d2
  , padWindowCase d6 d6 d0 d0 d0 d0 d2 d2 d2 d2 d3
  , padWindowCase d2 d7 d1 d2 d3 d1 d4 d3 d2 d3 d1
  , poolCase "max" maxRef maxPool d6 d6 d2 d2 d2 d2 d2
  , poolCase "max" maxRef maxPool d7 d5 d3 d3 d2 d2 d1
  , poolCase "max" maxRef maxPool d5 d8 d2 d3 d1 d2 d3
  , poolCase "max" maxRef maxPool d4 d4 d4 d4 d1 d1 d1
  , poolCase "avg" avgRef avgPool d6 d6 d2 d2 d2 d2 d2
  , poolCase "avg" avgRef avgPool d7 d5 d3 d3 d2 d2 d1
  , poolCase "avg" avgRef avgPool d5 d8 d2 d3 d1 d2 d3
  , poolCase "avg" avgRef avgPool d4 d4 d1 d1 d1 d1 d1
  , poolCase "avg" avgRef avgPool d6 d7 d1 d2 d1 d1 d2
  , poolCase "avg" avgRef avgPool d5 d5 d4 d4 d1 d1 d1
  , paddedMaxPoolCase
  , collectCase d1 d3
  , collectCase d4 d2
  , collectCase d9 d1
  , collectCase d12 d3
  ]

-- * Pixels and images

type Px = Signed 8
type Fx = SFixed 3 4

-- | @count@ random images @h x w x c@ with raw values in @[lo, hi]@.
randomImages :: Int -> Int -> Int -> Int -> (Integer, Integer) -> StdGen -> [Image]
randomImages count h w c range gen = P.take count (chunk h (chunk w (chunk c values)))
  where values = randomRs range gen

chunk :: Int -> [a] -> [[a]]
chunk n xs = let (a, b) = P.splitAt n xs in a : chunk n b

-- | 20 to 25 images.
imageCount :: StdGen -> Int
imageCount gen = P.head (randomRs (20, 25) gen)

vecOf :: KnownNat n => [a] -> Vec n a
vecOf xs = map (\i -> xs P.!! fromEnum i) indicesI

pixelOf :: (KnownNat c, Num a) => Pixel -> Vec c a
pixelOf = vecOf . P.map fromInteger

fixedOf :: KnownNat c => Pixel -> Vec c Fx
fixedOf = vecOf . P.map (sf d4 . fromInteger)

beatsOf :: (Pixel -> b) -> [Image] -> [b]
beatsOf toBeat = P.map toBeat . P.concat . P.concat

-- * Running a case under every traffic pattern

-- | Run the block on the beats under every traffic pattern; compare the
-- delivered values with the expected ones and apply the timing check.
runCase
  :: (NFDataX a, NFDataX b, Eq b, Show b)
  => String
  -> (HiddenClockResetEnable System => Stream System a b)
  -> [a] -> [b]
  -> (Traffic -> Trace b -> ([String], [String]))
  -> StdGen -> Outcome
runCase name block beats expected timing gen0 = (name, P.concat fails, P.concat notes)
  where
    (fails, notes) = P.unzip (P.zipWith runOne trafficPatterns (gens gen0))
    runOne traffic gen = (P.map ((trafficName traffic P.++ ": ") P.++) (valueFails P.++ tFails), tNotes)
      where
        (g1, g2) = split gen
        trace = runStream block (gapsFor traffic g1) (readyFor traffic g2) beats
                          (P.length expected) 20 limit
        limit = 40 * (P.length beats + P.length expected) + 100
        got = P.map P.snd (delivered trace)
        valueFails = [ "hold rule broken" | P.not (holdOk trace) ] P.++ compareValues expected got
        (tFails, tNotes) = timing traffic trace

gens :: StdGen -> [StdGen]
gens g = let (a, b) = split g in a : gens b

compareValues :: (Eq b, Show b) => [b] -> [b] -> [String]
compareValues expected got
  | P.length got /= P.length expected =
      ["got " P.++ show (P.length got) P.++ " beats, expected " P.++ show (P.length expected)]
  | otherwise = P.take 1 [ "beat " P.++ show k P.++ ": got " P.++ show g P.++ " expected " P.++ show e
                         | (k, e, g) <- P.zip3 [0 :: Int ..] expected got, e /= g ]

noTiming :: Traffic -> Trace b -> ([String], [String])
noTiming _ _ = ([], [])

-- * Window

windowCase
  :: forall h w kh kw sh sw c
   . ( KnownNat h, KnownNat w, KnownNat kh, KnownNat kw, KnownNat sh, KnownNat sw
     , KnownNat c, 1 <= kh, 1 <= kw, 1 <= sh, 1 <= sw, kh <= h, kw <= w )
  => SNat h -> SNat w -> SNat kh -> SNat kw -> SNat sh -> SNat sw -> SNat c
  -> StdGen -> Outcome
windowCase h w kh kw sh sw c gen =
  runCase name (window h w kh kw sh sw) (beatsOf pixelOf imgs) expected
          (windowTiming (geometry h w kh kw sh sw)) gen2
  where
    name = "window " P.++ describe [h', w', kh', kw', sh', sw', snatToNum c]
    [h', w', kh', kw', sh', sw'] = geometry h w kh kw sh sw
    (gen1, gen2) = split gen
    imgs = randomImages (imageCount gen1) h' w' (snatToNum c) (-128, 127) gen1
    expected = P.concatMap (P.map windowOf . windowsRef kh' kw' sh' sw') imgs
    windowOf :: [[Pixel]] -> Vec kh (Vec kw (Vec c Px))
    windowOf = vecOf . P.map (vecOf . P.map pixelOf)

geometry :: SNat h -> SNat w -> SNat kh -> SNat kw -> SNat sh -> SNat sw -> [Int]
geometry h w kh kw sh sw =
  [snatToNum h, snatToNum w, snatToNum kh, snatToNum kw, snatToNum sh, snatToNum sw]

describe :: [Int] -> String
describe = P.unwords . P.map show

-- | The window timing claims. With downstream always ready: every window is
-- valid (and moves) in the cycle its completing pixel is accepted. With no
-- input gaps either: one pixel accepted every cycle.
windowTiming :: [Int] -> Traffic -> Trace b -> ([String], [String])
windowTiming = windowTimingAfter 0

-- | 'windowTiming' for a block that delivers each window's result @extra@
-- cycles after the window (a pooling's pipelined reduction: 'PoolDepth'
-- registers and its queue).
windowTimingAfter :: Int -> [Int] -> Traffic -> Trace b -> ([String], [String])
windowTimingAfter extra [h, w, kh, kw, sh, sw] traffic trace
  | stallPercent traffic /= 0 = ([], [])
  | otherwise = (lateness P.++ bubbles, notes)
  where
    perImage = outputSize h kh sh * outputSize w kw sw
    acc = accepted trace
    outCycles = P.map P.fst (delivered trace)
    completing k = let (m, local) = k `divMod` perImage
                   in acc P.!! (m * h * w + completingPixel w kh kw sh sw local)
    lateness = P.take 1 [ "window " P.++ show k P.++ " at cycle " P.++ show t
                          P.++ ", completing pixel accepted at " P.++ show (completing k)
                        | (k, t) <- P.zip [0 ..] outCycles, t /= completing k + extra ]
    clean = idlePercent traffic == 0
    bubbles = [ "input not accepted every cycle" | clean, acc /= P.take (P.length acc) [P.head acc ..] ]
    lastPixel = acc P.!! (h * w - 1)
    lastWindow = outCycles P.!! (perImage - 1)
    notes = [ "clean: first window " P.++ show (P.head outCycles - P.head acc)
              P.++ " cycles after first pixel (formula (kh-1)*w+kw-1 = "
              P.++ show ((kh - 1) * w + kw - 1) P.++ "); last window of image 0 at last pixel "
              P.++ showOffset (lastWindow - lastPixel) P.++ "; "
              P.++ show (P.length acc) P.++ " pixels in "
              P.++ show (P.last acc - P.head acc + 1) P.++ " cycles"
            | clean ]
windowTimingAfter _ _ _ _ = (["bad geometry"], [])

showOffset :: Int -> String
showOffset n = (if n >= 0 then "+" else "") P.++ show n

-- * Pad

padCase
  :: forall h w top bottom left right c
   . ( KnownNat h, KnownNat w, KnownNat top, KnownNat bottom, KnownNat left
     , KnownNat right, KnownNat c, 1 <= h, 1 <= w )
  => SNat h -> SNat w -> SNat top -> SNat bottom -> SNat left -> SNat right -> SNat c
  -> StdGen -> Outcome
padCase h w top bottom left right c gen =
  runCase name (pad h w top bottom left right padValue) (beatsOf pixelOf imgs) expected
          padTiming gen2
  where
    name = "pad " P.++ describe [snatToNum h, snatToNum w, top', bottom', left', right', snatToNum c]
    [top', bottom', left', right'] = [snatToNum top, snatToNum bottom, snatToNum left, snatToNum right]
    padValue = -7 :: Px
    (gen1, gen2) = split gen
    imgs = randomImages (imageCount gen1) (snatToNum h) (snatToNum w) (snatToNum c) (-128, 127) gen1
    padded = P.map (padRef top' bottom' left' right' (toInteger padValue)) imgs
    -- Pad pixels need no input: the next image's leading ones (top rows and
    -- the first left border) come out even though no next image follows.
    leading = top' * (left' + snatToNum w + right') + left'
    expected = beatsOf (pixelOf @c) padded
               P.++ P.replicate leading (repeat padValue)

-- | With no gaps and no stalls the pad emits one pixel every cycle.
padTiming :: Traffic -> Trace b -> ([String], [String])
padTiming traffic trace
  | idlePercent traffic == 0 && stallPercent traffic == 0 =
      ([ "output not every cycle" | outs /= P.take (P.length outs) [P.head outs ..] ],
       [ "clean: " P.++ show (P.length outs) P.++ " pixels out in "
         P.++ show (P.last outs - P.head outs + 1) P.++ " cycles" ])
  | otherwise = ([], [])
  where outs = P.map P.fst (delivered trace)

padWindowCase
  :: forall h w top bottom left right kh kw sh sw c
   . ( KnownNat h, KnownNat w, KnownNat top, KnownNat bottom, KnownNat left
     , KnownNat right, KnownNat kh, KnownNat kw, KnownNat sh, KnownNat sw, KnownNat c
     , 1 <= h, 1 <= w, 1 <= kh, 1 <= kw, 1 <= sh, 1 <= sw
     , kh <= (top + h + bottom), kw <= (left + w + right) )
  => SNat h -> SNat w -> SNat top -> SNat bottom -> SNat left -> SNat right
  -> SNat kh -> SNat kw -> SNat sh -> SNat sw -> SNat c
  -> StdGen -> Outcome
padWindowCase h w top bottom left right kh kw sh sw c gen =
  runCase name block (beatsOf pixelOf imgs) expected noTiming gen2
  where
    block :: HiddenClockResetEnable System => Stream System (Vec c Px) (Vec kh (Vec kw (Vec c Px)))
    block = pad h w top bottom left right 0
            |> window (SNat @(top + h + bottom)) (SNat @(left + w + right)) kh kw sh sw
    name = "pad+window " P.++ describe ([snatToNum h, snatToNum w, top', bottom', left', right']
                                        P.++ P.drop 2 (geometry h w kh kw sh sw) P.++ [snatToNum c])
    [top', bottom', left', right'] = [snatToNum top, snatToNum bottom, snatToNum left, snatToNum right]
    [_, _, kh', kw', sh', sw'] = geometry h w kh kw sh sw
    (gen1, gen2) = split gen
    imgs = randomImages (imageCount gen1) (snatToNum h) (snatToNum w) (snatToNum c) (-128, 127) gen1
    expected = P.concatMap (P.map windowOf . windowsRef kh' kw' sh' sw'
                            . padRef top' bottom' left' right' 0) imgs
    windowOf :: [[Pixel]] -> Vec kh (Vec kw (Vec c Px))
    windowOf = vecOf . P.map (vecOf . P.map pixelOf)

-- * Pooling

type Pool h w ph pw sh sw c
  =  HiddenClockResetEnable System
  => SNat h -> SNat w -> SNat ph -> SNat pw -> SNat sh -> SNat sw
  -> Stream System (Vec c Fx) (Vec c Fx)

poolCase
  :: forall h w ph pw sh sw c
   . ( KnownNat h, KnownNat w, KnownNat ph, KnownNat pw, KnownNat sh, KnownNat sw
     , KnownNat c, 1 <= ph, 1 <= pw, 1 <= sh, 1 <= sw, ph <= h, pw <= w )
  => String -> ([[Pixel]] -> Pixel) -> Pool h w ph pw sh sw c
  -> SNat h -> SNat w -> SNat ph -> SNat pw -> SNat sh -> SNat sw -> SNat c
  -> StdGen -> Outcome
poolCase kind reference pool h w ph pw sh sw c gen =
  runCase name (pool h w ph pw sh sw) (beatsOf fixedOf imgs) expected
          (windowTimingAfter (natToNum @(PoolDepth ph pw) + 1) (geometry h w ph pw sh sw)) gen2
  where
    name = kind P.++ "Pool " P.++ describe (geometry h w ph pw sh sw P.++ [snatToNum c])
    [h', w', ph', pw', sh', sw'] = geometry h w ph pw sh sw
    (gen1, gen2) = split gen
    imgs = P.map extremes (randomImages (imageCount gen1) h' w' (snatToNum c) (-80, 79) gen1)
    expected = P.concatMap (P.map (fixedOf @c . reference) . windowsRef ph' pw' sh' sw') imgs

-- | Clamp raw values to the SFixed 3 4 range (-64 .. 63), so that extremes
-- are frequent.
extremes :: Image -> Image
extremes = P.map (P.map (P.map (P.max (-64) . P.min 63)))

-- | 'same' max pooling: pad with minBound, then pool.
paddedMaxPoolCase :: StdGen -> Outcome
paddedMaxPoolCase gen = runCase name block (beatsOf fixedOf imgs) expected noTiming gen2
  where
    name = "pad(minBound)+maxPool 5 5 pad 0 1 0 1, pool 2 2 2 2, c 2"
    block :: HiddenClockResetEnable System => Stream System (Vec 2 Fx) (Vec 2 Fx)
    block = pad d5 d5 d0 d1 d0 d1 minBound |> maxPool d6 d6 d2 d2 d2 d2
    (gen1, gen2) = split gen
    imgs = P.map extremes (randomImages (imageCount gen1) 5 5 2 (-80, 79) gen1)
    expected = P.concatMap (P.map (fixedOf @2 . maxRef) . windowsRef 2 2 2 2
                            . padRef 0 1 0 1 (toInteger (unSF (minBound :: Fx)))) imgs

-- * Collect

collectCase
  :: forall n c . (KnownNat n, KnownNat c, 1 <= n)
  => SNat n -> SNat c -> StdGen -> Outcome
collectCase n c gen =
  runCase name (collect n) (beatsOf pixelOf imgs) expected (collectTiming (snatToNum n)) gen2
  where
    name = "collect " P.++ describe [snatToNum n, snatToNum c]
    (gen1, gen2) = split gen
    imgs = randomImages (imageCount gen1) 1 (snatToNum n) (snatToNum c) (-128, 127) gen1
    expected = P.map (vecOf @(n * c) @Px . P.map fromInteger . collectRef) imgs

-- | With downstream always ready: each vector moves the cycle after its last
-- beat is accepted. With no gaps either: the next image's first beat is
-- accepted the cycle after that.
collectTiming :: Int -> Traffic -> Trace b -> ([String], [String])
collectTiming n traffic trace
  | stallPercent traffic /= 0 = ([], [])
  | otherwise = (late P.++ slow, notes)
  where
    acc = accepted trace
    outs = P.map P.fst (delivered trace)
    lastBeats = P.map (\k -> acc P.!! (k * n + n - 1)) [0 .. P.length outs - 1]
    firstBeats = P.map (\k -> acc P.!! (k * n)) [1 .. P.length outs - 1]
    late = [ "vector not the cycle after its last beat" | outs /= P.map (+ 1) lastBeats ]
    clean = idlePercent traffic == 0
    slow = [ "next image not accepted right after delivery"
           | clean, firstBeats /= P.map (+ 1) (P.init outs) ]
    notes = [ "clean: " P.++ show (P.length acc) P.++ " beats in "
              P.++ show (P.last outs - P.head acc + 1) P.++ " cycles"
            | clean ]
