{-# LANGUAGE DataKinds, NoImplicitPrelude, RankNTypes, ScopedTypeVariables,
             FlexibleContexts, TypeApplications, MonoLocalBinds #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
Test harness for 'K2C.Stream.Stream' blocks in the Clash simulation.

A 'source' offers beats after random idle gaps and, once it shows a beat,
holds it until it moves (the stream rule). Downstream ready is a random
pattern. 'runStream' records every input beat that moved and every output
beat that moved, with cycle numbers (cycle 0 is the reset cycle: nothing is
offered then), and checks the producer rule on the block's output: a @Just v@
not taken must be shown again in the next cycle.
-}
module Harness
  ( Trace (..)
  , Traffic (..)
  , runStream
  , trafficPatterns
  , gapsFor
  , readyFor
  , source
  ) where

import Clash.Prelude
import Clash.Signal.Internal (Signal ((:-)))
import qualified Prelude as P
import System.Random (StdGen, randomRs)

import K2C.Stream (Stream)

-- | What happened in a run.
data Trace b = Trace
  { accepted  :: [Int]        -- ^ cycles in which an input beat moved
  , delivered :: [(Int, b)]   -- ^ cycles and values of output beats that moved
  , holdOk    :: Bool         -- ^ the block's output obeyed the hold rule
  }

-- | How hostile the environment is: chance (in percent) of an idle input
-- cycle before a beat, and of a downstream stall in a cycle.
data Traffic = Traffic { trafficName :: String, idlePercent :: Int, stallPercent :: Int }

-- | The patterns every test runs: clean (timing checks), gaps only, stalls
-- only, both.
trafficPatterns :: [Traffic]
trafficPatterns =
  [ Traffic "clean" 0 0, Traffic "gaps" 40 0, Traffic "stalls" 0 50
  , Traffic "gaps+stalls" 30 40, Traffic "heavy" 70 70 ]

-- | Idle cycles before each beat: geometric with the given percentage. The
-- first beat waits one more cycle (cycle 0 is the reset cycle).
gapsFor :: Traffic -> StdGen -> [Int]
gapsFor traffic gen = case geometric (idlePercent traffic) gen of
  g : gs -> g + 1 : gs
  []     -> []

-- | Downstream ready, cycle by cycle.
readyFor :: Traffic -> StdGen -> [Bool]
readyFor traffic gen = P.map (>= stallPercent traffic) (randomRs (0, 99 :: Int) gen)

geometric :: Int -> StdGen -> [Int]
geometric percent gen = runs (randomRs (0, 99 :: Int) gen)
  where
    runs rolls = let (idle, rest) = P.span (< percent) rolls
                 in P.length idle : runs (P.drop 1 rest)

-- | Offer the beats in order, each after its idle gap, holding each beat
-- until the ready says it moved.
source :: [Int] -> [a] -> Signal dom Bool -> Signal dom (Maybe a)
source _ [] ready = Nothing :- source [] [] (tailS ready)
source gaps (beat : beats) ~(r :- rs) = case gaps of
  g : gs | g > 0 -> Nothing :- source (g - 1 : gs) (beat : beats) rs
  _ : gs         -> Just beat :- if r then source gs beats rs
                                      else source (0 : gs) (beat : beats) rs
  []             -> source [0] (beat : beats) (r :- rs)

tailS :: Signal dom a -> Signal dom a
tailS ~(_ :- rest) = rest

-- | Run a block on the given beats and traffic until @expected@ output beats
-- have moved, then @extra@ more cycles (to catch spurious outputs), or until
-- @limit@ cycles have passed.
runStream
  :: forall a b . (NFDataX a, NFDataX b, Eq b)
  => (HiddenClockResetEnable System => Stream System a b)
  -> [Int] -> [Bool] -> [a] -> Int -> Int -> Int -> Trace b
runStream block gaps readies beats expected extra limit = Trace ins outs hold
  where
    readyOut = fromList (False : readies)
    (output, readyIn) = withClockResetEnable clockGen resetGen enableGen
                          block (input, readyOut)
    input = source gaps beats readyIn
    samples = P.zip [0 ..] (sample (bundle (input, readyIn, output, readyOut)))
    finish = P.length (P.takeWhile (< expected) (P.scanl (+) 0 (P.map outMoved (P.take limit samples))))
    run = P.take (P.min limit (finish + extra)) samples
    outMoved (_, (_, _, o, r)) = if r && isJustB o then 1 else 0 :: Int
    ins  = [t | (t, (Just _, True, _, _)) <- run]
    outs = [(t, v) | (t, (_, _, Just v, True)) <- run]
    hold = P.and (P.zipWith holds run (P.drop 1 run))
    holds (_, (_, _, Just v, False)) (_, (_, _, o', _)) = o' == Just v
    holds _ _ = True

isJustB :: Maybe a -> Bool
isJustB (Just _) = True
isJustB Nothing  = False
